// Formatting always emits exactly Scale fractional digits, so every rendered
// amount reads back through Parse or ParseSum to the same units.

package money

import "math/bits"

// FormatUnits renders units as a decimal string with exactly Scale fractional
// digits: 12345 -> "1.2345", -1 -> "-0.0001", 0 -> "0.0000".
func FormatUnits(u int64) string {
	var buf [24]byte
	return string(AppendUnits(buf[:0], u))
}

// AppendUnits is FormatUnits appending to dst; it does not allocate when dst
// has room for the result (at most 21 bytes).
func AppendUnits(dst []byte, u int64) []byte {
	mag := uint64(u)
	if u < 0 {
		mag = -mag // also right for MinInt64, whose magnitude is 2^63
	}
	return appendMag(dst, u < 0, 0, mag)
}

// appendMag renders the 128-bit magnitude hi:lo, in units, with a sign.
func appendMag(dst []byte, neg bool, hi, lo uint64) []byte {
	// 2^128 has 39 digits; one more for the point and one for a leading 0.
	var buf [41]byte
	i := len(buf)
	digits := 0
	for hi != 0 || lo != 0 || digits <= Scale {
		// Peel 19 digits at a time with one 128/64 division, then render the
		// remainder with cheap 64-bit arithmetic.
		var r uint64
		hi, r = hi/1e19, hi%1e19
		lo, r = bits.Div64(r, lo, 1e19)
		more := hi != 0 || lo != 0
		for k := 0; k < 19 && (more || r != 0 || digits <= Scale); k++ {
			if digits == Scale {
				i--
				buf[i] = '.'
			}
			i--
			buf[i] = byte('0' + r%10)
			r /= 10
			digits++
		}
	}
	if neg {
		i--
		buf[i] = '-'
	}
	return append(dst, buf[i:]...)
}
