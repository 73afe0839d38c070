// Package partition names Kafka partitions and where each one resumes: the vocabulary the
// consumer, the ledger and the commit protocol share.
//
// Invariant: an Offsets value holds the next offset to read per partition (Kafka's position,
// one past the last record covered), never the last record's own offset.
package partition

// Map is topic → partition → V: the shape of every per-partition value here. Each meaning is an
// instance of its own (Offsets, Claims), so the compiler tells one from the other.
type Map[V comparable] map[string]map[int32]V

// Offsets maps topic → partition → next offset to read.
type Offsets = Map[int64]

// Claims maps topic → partition → the owner epoch a member took it at (ledger.TakePartitions): a
// member's decision counts for a partition only while the partition's epoch is still its own.
type Claims = Map[Epoch]

// Epoch is a partition's owner epoch: it grows by one each time a member takes the partition.
type Epoch int64

// Marks maps topic → partition → its low and high watermark, as read from the broker.
type Marks map[string]map[int32][2]int64

// Set records a partition's watermarks.
func (m Marks) Set(topic string, p int32, low, high int64) {
	if m[topic] == nil {
		m[topic] = map[int32][2]int64{}
	}
	m[topic][p] = [2]int64{low, high}
}

// Clone returns a deep copy.
func (o Map[V]) Clone() Map[V] {
	c := make(Map[V], len(o))
	for t, ps := range o {
		m := make(map[int32]V, len(ps))
		for p, off := range ps {
			m[p] = off
		}
		c[t] = m
	}
	return c
}

// Len is the number of partitions.
func (o Map[V]) Len() int {
	n := 0
	for _, ps := range o {
		n += len(ps)
	}
	return n
}

// Set records a partition's value.
func (o Map[V]) Set(topic string, p int32, v V) {
	m := o[topic]
	if m == nil {
		m = map[int32]V{}
		o[topic] = m
	}
	m[p] = v
}

// Get returns a partition's value.
func (o Map[V]) Get(topic string, p int32) (V, bool) {
	v, ok := o[topic][p]
	return v, ok
}

// Equal reports whether two maps hold the same partitions with the same values.
func (o Map[V]) Equal(x Map[V]) bool {
	if len(o) != len(x) {
		return false
	}
	for t, ps := range o {
		if len(ps) != len(x[t]) {
			return false
		}
		for p, off := range ps {
			if xo, ok := x[t][p]; !ok || xo != off {
				return false
			}
		}
	}
	return true
}
