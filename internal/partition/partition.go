// Package partition names Kafka partitions and where each one resumes: the vocabulary the
// consumer, the ledger and the commit protocol share.
//
// Invariant: an Offsets value holds the next offset to read per partition (Kafka's position,
// one past the last record covered), never the last record's own offset.
package partition

// Offsets maps topic → partition → next offset to read.
type Offsets map[string]map[int32]int64

// Marks maps topic → partition → its low and high watermark, as read from the broker.
type Marks map[string]map[int32][2]int64

// Set records a partition's watermarks.
func (m Marks) Set(topic string, p int32, low, high int64) {
	if m[topic] == nil {
		m[topic] = map[int32][2]int64{}
	}
	m[topic][p] = [2]int64{low, high}
}

// Epochs maps topic → partition → the owner epoch a member took it at (ledger.TakePartitions):
// the shape of Offsets, another meaning.
type Epochs = Offsets

// Clone returns a deep copy.
func (o Offsets) Clone() Offsets {
	c := make(Offsets, len(o))
	for t, ps := range o {
		m := make(map[int32]int64, len(ps))
		for p, off := range ps {
			m[p] = off
		}
		c[t] = m
	}
	return c
}

// Len is the number of partitions.
func (o Offsets) Len() int {
	n := 0
	for _, ps := range o {
		n += len(ps)
	}
	return n
}

// Set records the next offset of a partition.
func (o Offsets) Set(topic string, p int32, next int64) {
	m := o[topic]
	if m == nil {
		m = map[int32]int64{}
		o[topic] = m
	}
	m[p] = next
}

// Get returns the next offset of a partition.
func (o Offsets) Get(topic string, p int32) (int64, bool) {
	off, ok := o[topic][p]
	return off, ok
}

// Equal reports whether two offset sets are the same.
func (o Offsets) Equal(x Offsets) bool {
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
