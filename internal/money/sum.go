// Sum is exact: additions are 128-bit two's complement, so adding up to 2^64
// int64 amounts can neither overflow nor round.

package money

import "math/bits"

// Sum is an exact 128-bit signed sum of units. The zero value is 0.
type Sum struct {
	hi int64
	lo uint64
}

// SumOf returns u as a Sum.
func SumOf(u int64) Sum {
	return Sum{hi: u >> 63, lo: uint64(u)}
}

// Add adds u to s.
func (s *Sum) Add(u int64) {
	var carry uint64
	s.lo, carry = bits.Add64(s.lo, uint64(u), 0)
	// u>>63 is the sign extension of u into the high word (0 or -1).
	s.hi += u>>63 + int64(carry)
}

// AddSum adds t to s; like Add it wraps only beyond 128 bits.
func (s *Sum) AddSum(t Sum) {
	var carry uint64
	s.lo, carry = bits.Add64(s.lo, t.lo, 0)
	hi, _ := bits.Add64(uint64(s.hi), uint64(t.hi), carry)
	s.hi = int64(hi)
}

// IsZero reports whether s is 0.
func (s Sum) IsZero() bool { return s.hi == 0 && s.lo == 0 }

// Cmp returns -1, 0 or +1 as s is less than, equal to or greater than t.
func (s Sum) Cmp(t Sum) int {
	switch {
	case s.hi < t.hi:
		return -1
	case s.hi > t.hi:
		return 1
	case s.lo < t.lo:
		return -1
	case s.lo > t.lo:
		return 1
	}
	return 0
}

// mag returns |s| as an unsigned 128-bit value; |-2^127| = 2^127 still fits.
func (s Sum) mag() (neg bool, hi, lo uint64) {
	hi, lo = uint64(s.hi), s.lo
	if s.hi >= 0 {
		return false, hi, lo
	}
	var borrow uint64
	lo, borrow = bits.Sub64(0, lo, 0)
	hi, _ = bits.Sub64(0, hi, borrow)
	return true, hi, lo
}

// pow10x128 holds 10^0..10^38 as hi:lo pairs; 10^38 is the largest that fits
// a signed 128-bit value.
var pow10x128 = func() (t [39][2]uint64) {
	t[0] = [2]uint64{0, 1}
	for i := 1; i < len(t); i++ {
		hi, lo := bits.Mul64(t[i-1][1], 10)
		t[i] = [2]uint64{t[i-1][0]*10 + hi, lo}
	}
	return t
}()

// FitsDigits reports whether |s| < 10^n units, i.e. whether s fits a
// DECIMAL(n, Scale) column. n <= 0 admits only zero; n > 38 admits every Sum,
// since |s| <= 2^127 < 10^39.
func (s Sum) FitsDigits(n int) bool {
	if n <= 0 {
		return s.IsZero()
	}
	if n >= len(pow10x128) {
		return true
	}
	_, hi, lo := s.mag()
	p := pow10x128[n]
	return hi < p[0] || hi == p[0] && lo < p[1]
}

// String renders s like FormatUnits, with exactly Scale fractional digits.
func (s Sum) String() string {
	var buf [41]byte
	neg, hi, lo := s.mag()
	return string(appendMag(buf[:0], neg, hi, lo))
}

// ParseSum reads what String writes (and what MySQL prints for a
// DECIMAL(n,4) column): optional '-', digits, optional '.' and digits. Fewer
// than Scale fractional digits are fine; more are accepted only if the extra
// ones are zeros. No exponent: sums are read back from MySQL, not from JSON.
func ParseSum(str string) (Sum, error) {
	n := len(str)
	neg, i := sign(str)
	var hi, lo uint64
	ok := true
	push := func(c byte) {
		// hi:lo = hi:lo*10 + c, tracking overflow past 2^127.
		h1, l1 := bits.Mul64(lo, 10)
		h2, h1b := bits.Mul64(hi, 10)
		var carry uint64
		l1, carry = bits.Add64(l1, uint64(c-'0'), 0)
		h1, carry2 := bits.Add64(h1, h1b, carry)
		if h2 != 0 || carry2 != 0 || h1 > 1<<63 || h1 == 1<<63 && l1 != 0 {
			ok = false
		}
		hi, lo = h1, l1
	}
	start := i
	for i < n && isDigit(str[i]) {
		if ok {
			push(str[i])
		}
		i++
	}
	if i == start {
		return Sum{}, ErrSyntax
	}
	frac := 0
	if i < n && str[i] == '.' {
		i++
		fs := i
		for i < n && isDigit(str[i]) {
			if frac < Scale {
				if ok {
					push(str[i])
				}
				frac++
			} else if str[i] != '0' {
				// Finish the syntax check first so garbage is ErrSyntax.
				for i < n && isDigit(str[i]) {
					i++
				}
				if i != n {
					return Sum{}, ErrSyntax
				}
				return Sum{}, ErrPrecision
			}
			i++
		}
		if i == fs {
			return Sum{}, ErrSyntax
		}
	}
	if i != n {
		return Sum{}, ErrSyntax
	}
	for ; frac < Scale && ok; frac++ {
		push('0')
	}
	if !ok || !neg && hi == 1<<63 {
		return Sum{}, ErrRange
	}
	s := Sum{hi: int64(hi), lo: lo}
	if neg {
		var borrow uint64
		s.lo, borrow = bits.Sub64(0, lo, 0)
		h, _ := bits.Sub64(0, hi, borrow)
		s.hi = int64(h)
	}
	return s, nil
}
