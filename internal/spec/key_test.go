package spec

import (
	"bytes"
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/relay-sh/relay/internal/testenv"
)

// tuple is a primary key as MySQL compares it: window, then each column in turn.
type tuple struct {
	window int64
	dims   []Value
}

func refCompare(ints []bool, a, b tuple) int {
	if c := cmp.Compare(a.window, b.window); c != 0 {
		return c
	}
	for i := range ints {
		var c int
		if ints[i] {
			c = cmp.Compare(a.dims[i].Int, b.dims[i].Int)
		} else {
			c = bytes.Compare(a.dims[i].Bytes, b.dims[i].Bytes) // binary, no pad
		}
		if c != 0 {
			return c
		}
	}
	return 0
}

func randTuple(rng *rand.Rand, ints []bool) tuple {
	num := func() int64 {
		switch rng.IntN(4) {
		case 0:
			return []int64{math.MinInt64, -1, 0, 1, math.MaxInt64}[rng.IntN(5)]
		case 1:
			return rng.Int64N(5) - 2
		}
		return int64(rng.Uint64())
	}
	t := tuple{window: num()}
	for _, isInt := range ints {
		if isInt {
			t.dims = append(t.dims, Value{Int: num()})
			continue
		}
		// Bytes that stress the escape: NUL, the terminator and escape bytes, and ordinary ones.
		b := make([]byte, rng.IntN(4))
		for i := range b {
			b[i] = []byte{0x00, 0x01, 0xFF, 'a', 'b'}[rng.IntN(5)]
		}
		t.dims = append(t.dims, Value{Bytes: b})
	}
	return t
}

// The codec's byte order is the primary key's order, for random shapes and tuples, and Decode
// inverts Append.
func TestCodecOrderAndRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(testenv.Seed(t, "RELAY_TEST_SEED", 1), 2))
	for shape := 0; shape < 60; shape++ {
		ints := make([]bool, rng.IntN(4))
		c := Codec{}
		for i := range ints {
			ints[i] = rng.IntN(2) == 0
			c.fields = append(c.fields, i)
		}
		c.ints = ints
		tuples := make([]tuple, 150)
		keys := make([][]byte, len(tuples))
		for i := range tuples {
			tuples[i] = randTuple(rng, ints)
			keys[i] = c.Append(nil, tuples[i].window, tuples[i].dims)
			w, dims, err := c.Decode(keys[i], nil)
			if err != nil || w != tuples[i].window || !slices.EqualFunc(dims, tuples[i].dims, func(a, b Value) bool {
				return a.Int == b.Int && bytes.Equal(a.Bytes, b.Bytes)
			}) {
				t.Fatalf("shape %v: %+v decodes to %d %+v (%v)", ints, tuples[i], w, dims, err)
			}
		}
		for i := range tuples {
			for j := range tuples {
				if got, want := bytes.Compare(keys[i], keys[j]), refCompare(ints, tuples[i], tuples[j]); got != want {
					t.Fatalf("shape %v: %+v vs %+v: codec says %d, SQL %d", ints, tuples[i], tuples[j], got, want)
				}
			}
		}
	}
}

func TestCodecCases(t *testing.T) {
	c := Codec{fields: []int{0, 1}, ints: []bool{false, false}}
	s := func(a, b string) []byte { return c.Append(nil, 0, []Value{{Bytes: []byte(a)}, {Bytes: []byte(b)}}) }
	// Column by column: ("a","b") < ("ab",""), although "ab" < "ab" as concatenations would tie.
	if bytes.Compare(s("a", "b"), s("ab", "")) >= 0 {
		t.Error(`("a","b") does not sort before ("ab","")`)
	}
	if bytes.Compare(s("a", "zzz"), s("a\x00", "")) >= 0 {
		t.Error(`("a","zzz") does not sort before ("a\x00","")`)
	}
	for _, bad := range [][]byte{nil, {1, 2, 3}, append(s("a", "b")[:8:8], 'a', 0), append(s("a", "b")[:8:8], 'a', 0, 7)} {
		if _, _, err := c.Decode(bad, nil); err == nil {
			t.Errorf("Decode(%q) accepted a malformed key", bad)
		}
	}
	ic := Codec{fields: []int{0}, ints: []bool{true}}
	if _, _, err := ic.Decode(append(ic.Append(nil, 0, []Value{{Int: 1}}), 0), nil); err == nil {
		t.Error("Decode accepted trailing bytes")
	}
}
