// The key codec. Invariant: for two keys of one aggregate, bytes.Compare of their encodings equals
// MySQL's comparison of their primary keys (window_start, then each dimension column by column:
// strings in a binary no-pad collation, integers by value), and Decode inverts Append exactly. So
// sorting rows by encoded key sorts them in primary-key order, which is what keeps two upserts
// from locking rows in opposite orders.

package spec

import (
	"encoding/binary"
	"errors"
)

// Codec encodes window start and dimension values of one aggregate.
//
//   - window start and int dimensions: 8 bytes big-endian with the sign bit flipped, so byte order
//     is signed order;
//   - a string dimension that is not the last: its bytes with 0x00 written as 0x00 0xFF, then the
//     terminator 0x00 0x01. The terminator sorts below every byte a longer string could continue
//     with, so ("a","b") < ("ab","") as in a column-by-column comparison;
//   - the last string dimension: its bytes as they are (nothing follows it to be confused with).
type Codec struct {
	fields []int  // value index of each dimension
	ints   []bool // dimension is an int
}

func (p *Plan) codec(dims []dim) Codec {
	var c Codec
	for _, d := range dims {
		c.fields = append(c.fields, d.field)
		c.ints = append(c.ints, p.fields[d.field].typ == typeInt)
	}
	return c
}

const signBit = 1 << 63

// Append encodes window and the dimension values (vals is indexed by field) onto dst.
func (c Codec) Append(dst []byte, window int64, vals []Value) []byte {
	dst = binary.BigEndian.AppendUint64(dst, uint64(window)^signBit)
	for i, f := range c.fields {
		v := &vals[f]
		switch {
		case c.ints[i]:
			dst = binary.BigEndian.AppendUint64(dst, uint64(v.Int)^signBit)
		case i == len(c.fields)-1:
			dst = append(dst, v.Bytes...)
		default:
			for _, b := range v.Bytes {
				if b == 0 {
					dst = append(dst, 0, 0xFF)
				} else {
					dst = append(dst, b)
				}
			}
			dst = append(dst, 0, 1)
		}
	}
	return dst
}

var errKey = errors.New("spec: malformed key")

// Decode returns the window and the dimension values, in dimension order, of a key Append made;
// dims is reused. String values alias key when they had nothing to unescape.
func (c Codec) Decode(key []byte, dims []Value) (int64, []Value, error) {
	dims = dims[:0]
	if len(key) < 8 {
		return 0, dims, errKey
	}
	window := int64(binary.BigEndian.Uint64(key) ^ signBit)
	key = key[8:]
	for i := range c.fields {
		var v Value
		switch {
		case c.ints[i]:
			if len(key) < 8 {
				return 0, dims, errKey
			}
			v.Int, key = int64(binary.BigEndian.Uint64(key)^signBit), key[8:]
		case i == len(c.fields)-1:
			v.Bytes, key = key, nil
		default:
			var ok bool
			if v.Bytes, key, ok = unescapeKey(key); !ok {
				return 0, dims, errKey
			}
		}
		dims = append(dims, v)
	}
	if len(key) != 0 {
		return 0, dims, errKey
	}
	return window, dims, nil
}

// unescapeKey reads one escaped, terminated string off the front of key.
func unescapeKey(key []byte) (s, rest []byte, ok bool) {
	escaped := false // s is a copy; before the first escape it would alias key
	for i := 0; i < len(key); i++ {
		if key[i] != 0 {
			if escaped {
				s = append(s, key[i])
			}
			continue
		}
		if i+1 == len(key) {
			return nil, nil, false
		}
		switch key[i+1] {
		case 1:
			if !escaped {
				s = key[:i:i]
			}
			return s, key[i+2:], true
		case 0xFF:
			if !escaped {
				s, escaped = append([]byte(nil), key[:i]...), true
			}
			s = append(s, 0)
			i++
		default:
			return nil, nil, false
		}
	}
	return nil, nil, false
}
