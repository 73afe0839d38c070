// Package money keeps amounts as exact integer counts of 10^-Scale units.
// Invariant: no amount ever passes through a float, and a value that cannot be
// represented exactly at Scale is an error, never rounded.
package money

import "errors"

// Scale is the number of fractional digits of the amount columns (DECIMAL(38,4)).
const Scale = 4

// Errors returned by Parse and ParseSum. When an input is both too precise and
// too large, ErrPrecision wins: precision is a property of the digits alone,
// so the answer does not depend on which limit the caller configured.
var (
	ErrSyntax    = errors.New("money: not a decimal number")
	ErrPrecision = errors.New("money: more fractional digits than the scale")
	ErrRange     = errors.New("money: amount out of range")
)

// pow10[i] = 10^i; 10^19 is the largest power of ten that fits a uint64.
var pow10 = [20]uint64{
	1, 10, 100, 1000, 10000, 100000, 1000000, 10000000, 100000000, 1000000000,
	10000000000, 100000000000, 1000000000000, 10000000000000, 100000000000000,
	1000000000000000, 10000000000000000, 100000000000000000, 1000000000000000000,
	10000000000000000000,
}

// expCap saturates the exponent: any |exponent| this large already decides
// the outcome (a non-zero digit is then out of range or out of precision), and
// saturating keeps the position arithmetic below from overflowing.
const expCap = 1 << 40

// cutoff is the largest accumulator value that can take one more digit without
// leaving uint64; past it the magnitude exceeds 2^63 anyway.
const cutoff = (1 << 63) / 10

// Parse reads a decimal amount in units of 10^-Scale. Grammar: optional '-',
// digits, optional '.' followed by at least one digit, optional exponent
// (e|E, optional sign, digits) applied exactly, as in JSON numbers. Leading
// zeros are allowed and "-0" is 0. It returns ErrSyntax, ErrPrecision (a
// non-zero digit below 10^-Scale after applying the exponent) or ErrRange (the
// units do not fit an int64).
func Parse(b []byte) (int64, error) {
	n := len(b)
	neg, i := sign(b)
	intStart := i
	for i < n && isDigit(b[i]) {
		i++
	}
	intEnd := i
	if intEnd == intStart {
		return 0, ErrSyntax
	}
	fracStart, fracEnd := i, i
	if i < n && b[i] == '.' {
		i++
		fracStart = i
		for i < n && isDigit(b[i]) {
			i++
		}
		fracEnd = i
		if fracEnd == fracStart {
			return 0, ErrSyntax
		}
	}
	var exp int64
	if i < n && (b[i] == 'e' || b[i] == 'E') {
		i++
		expNeg := false
		if i < n && (b[i] == '+' || b[i] == '-') {
			expNeg = b[i] == '-'
			i++
		}
		expStart := i
		for i < n && isDigit(b[i]) {
			if exp < expCap {
				exp = exp*10 + int64(b[i]-'0')
			}
			i++
		}
		if i == expStart {
			return 0, ErrSyntax
		}
		if expNeg {
			exp = -exp
		}
	}
	if i != n {
		return 0, ErrSyntax
	}

	// View the integer and fraction digits as one digit string; the first p of
	// them form the integer count of units, the rest must all be zero.
	ip, fp := b[intStart:intEnd], b[fracStart:fracEnd]
	p := int64(len(ip)) + exp + Scale
	ipCut := clamp(p, len(ip))
	fpCut := clamp(p-int64(len(ip)), len(fp))
	if !allZero(ip[ipCut:]) || !allZero(fp[fpCut:]) {
		return 0, ErrPrecision
	}
	d, ok := accumulate(0, ip[:ipCut])
	if ok {
		d, ok = accumulate(d, fp[:fpCut])
	}
	if !ok {
		return 0, ErrRange
	}
	if pad := p - int64(len(ip)+len(fp)); pad > 0 && d != 0 {
		if pad >= int64(len(pow10)) || d > (1<<63)/pow10[pad] {
			return 0, ErrRange
		}
		d *= pow10[pad]
	}
	if neg {
		if d > 1<<63 {
			return 0, ErrRange
		}
		// For d == 2^63 the conversion wraps to MinInt64, which is the answer.
		return -int64(d), nil
	}
	if d > 1<<63-1 {
		return 0, ErrRange
	}
	return int64(d), nil
}

func isDigit(c byte) bool { return c-'0' < 10 }

// clamp bounds a digit position to [0, n].
func clamp(p int64, n int) int {
	if p <= 0 {
		return 0
	}
	if p >= int64(n) {
		return n
	}
	return int(p)
}

func allZero(s []byte) bool {
	for _, c := range s {
		if c != '0' {
			return false
		}
	}
	return true
}

// accumulate appends decimal digits to d. It reports false once the value
// exceeds 2^63, the largest magnitude any int64 result can have; leading zeros
// never trip it because d stays 0.
func accumulate(d uint64, s []byte) (uint64, bool) {
	for _, c := range s {
		if d > cutoff {
			return 0, false
		}
		d = d*10 + uint64(c-'0')
	}
	return d, d <= 1<<63
}

// sign reads an optional leading '-' of an amount (Parse) or a sum (ParseSum): whether it is
// negative, and where its digits start.
func sign[T string | []byte](s T) (neg bool, digits int) {
	if len(s) > 0 && s[0] == '-' {
		return true, 1
	}
	return false, 0
}
