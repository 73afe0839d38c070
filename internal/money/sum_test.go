// Sum is checked against math/big, which is slow but obviously exact.

package money

import (
	"errors"
	"math"
	"math/big"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/relay-sh/relay/internal/testenv"
)

// bigUnits renders a big.Int count of units the way String must.
func bigUnits(v *big.Int) string {
	neg := v.Sign() < 0
	mag := new(big.Int).Abs(v).String()
	if len(mag) <= Scale {
		mag = strings.Repeat("0", Scale+1-len(mag)) + mag
	}
	out := mag[:len(mag)-Scale] + "." + mag[len(mag)-Scale:]
	if neg {
		out = "-" + out
	}
	return out
}

// toBig reads a Sum's words directly, independently of String.
func toBig(s Sum) *big.Int {
	v := new(big.Int).Lsh(big.NewInt(s.hi), 64)
	return v.Add(v, new(big.Int).SetUint64(s.lo))
}

func randInt64(r *rand.Rand) int64 {
	switch r.IntN(4) {
	case 0:
		return math.MaxInt64 - r.Int64N(3)
	case 1:
		return math.MinInt64 + r.Int64N(3)
	case 2:
		return r.Int64N(2_000_000) - 1_000_000
	}
	return int64(r.Uint64())
}

func TestSumAgainstBig(t *testing.T) {
	r := rand.New(rand.NewPCG(testenv.Seed(t, "RELAY_TEST_SEED", 1), 2))
	for trial := range 200 {
		var s, other Sum
		want, wantOther := new(big.Int), new(big.Int)
		// Long runs of same-sign extremes force carries and borrows across
		// the word boundary in both directions.
		for range 1 + r.IntN(3000) {
			u := randInt64(r)
			s.Add(u)
			want.Add(want, big.NewInt(u))
			v := randInt64(r)
			other.Add(v)
			wantOther.Add(wantOther, big.NewInt(v))
		}
		if got := toBig(s); got.Cmp(want) != 0 {
			t.Fatalf("trial %d: Sum = %v, want %v", trial, got, want)
		}
		if got, w := s.String(), bigUnits(want); got != w {
			t.Fatalf("trial %d: String = %s, want %s", trial, got, w)
		}
		if got, w := s.Cmp(other), want.Cmp(wantOther); got != w {
			t.Fatalf("trial %d: Cmp = %d, want %d", trial, got, w)
		}
		s.AddSum(other)
		want.Add(want, wantOther)
		if got := toBig(s); got.Cmp(want) != 0 {
			t.Fatalf("trial %d: AddSum = %v, want %v", trial, got, want)
		}
		if got, w := s.String(), bigUnits(want); got != w {
			t.Fatalf("trial %d: String after AddSum = %s, want %s", trial, got, w)
		}
		back, err := ParseSum(s.String())
		if err != nil || back != s {
			t.Fatalf("trial %d: ParseSum(%s) = %v, %v", trial, s.String(), toBig(back), err)
		}
	}
}

func TestSumCarryEdges(t *testing.T) {
	var s Sum
	s.Add(math.MaxInt64)
	s.Add(math.MaxInt64)
	s.Add(2) // 2^64 exactly: the low word wraps to 0 and carries.
	if s.hi != 1 || s.lo != 0 {
		t.Fatalf("2^64 = %d:%d", s.hi, s.lo)
	}
	s.Add(-1)
	if s.hi != 0 || s.lo != math.MaxUint64 {
		t.Fatalf("2^64-1 = %d:%d", s.hi, s.lo)
	}
	if got := s.String(); got != "1844674407370955.1615" {
		t.Fatalf("String(2^64-1) = %s", got)
	}
	var n Sum
	n.Add(math.MinInt64)
	n.Add(math.MinInt64)
	if got := n.String(); got != "-1844674407370955.1616" {
		t.Fatalf("String(-2^64) = %s", got)
	}
	n.AddSum(s)
	if got := n.String(); got != "-0.0001" {
		t.Fatalf("-2^64 + 2^64-1 = %s", got)
	}
	if SumOf(-5).Cmp(SumOf(3)) != -1 || SumOf(3).Cmp(SumOf(-5)) != 1 || SumOf(7).Cmp(SumOf(7)) != 0 {
		t.Fatal("Cmp disagrees with the sign of small values")
	}
	if !(Sum{}).IsZero() || SumOf(1).IsZero() || SumOf(0) != (Sum{}) {
		t.Fatal("IsZero/SumOf(0) wrong")
	}
}

func TestSumString(t *testing.T) {
	tests := []struct {
		s    Sum
		want string
	}{
		{Sum{}, "0.0000"},
		{SumOf(1), "0.0001"},
		{SumOf(-1), "-0.0001"},
		{SumOf(math.MinInt64), "-922337203685477.5808"},
		{bigSum("1000000000000000000000000000000"), "100000000000000000000000000.0000"},
		{bigSum("99999999999999999999999999999999999999"), "9999999999999999999999999999999999.9999"},
		{bigSum("170141183460469231731687303715884105727"), "17014118346046923173168730371588410.5727"},
		{bigSum("-170141183460469231731687303715884105728"), "-17014118346046923173168730371588410.5728"},
		// A 19-digit chunk with interior zeros must be zero-padded.
		{bigSum("10000000000000000000000000000000000001"), "1000000000000000000000000000000000.0001"},
	}
	for _, tc := range tests {
		if got := tc.s.String(); got != tc.want {
			t.Errorf("String(%v) = %s, want %s", toBig(tc.s), got, tc.want)
		}
	}
}

// bigSum builds a Sum from a decimal count of units by repeated Add, so it
// does not depend on ParseSum.
func bigSum(dec string) Sum {
	v, ok := new(big.Int).SetString(dec, 10)
	if !ok {
		panic(dec)
	}
	var s Sum
	step := big.NewInt(math.MaxInt64)
	neg := v.Sign() < 0
	v.Abs(v)
	q, r := new(big.Int).QuoRem(v, step, new(big.Int))
	// v = q*MaxInt64 + r; add MaxInt64 q times via doubling.
	acc := SumOf(math.MaxInt64)
	for i := 0; i < q.BitLen(); i++ {
		if q.Bit(i) == 1 {
			s.AddSum(acc)
		}
		acc.AddSum(acc)
	}
	s.Add(r.Int64())
	if neg {
		var z Sum
		z.AddSum(Sum{hi: ^s.hi, lo: ^s.lo})
		z.Add(1)
		s = z
	}
	return s
}

func TestFitsDigits(t *testing.T) {
	max38 := bigSum("99999999999999999999999999999999999999")  // 10^38-1
	ten38 := bigSum("100000000000000000000000000000000000000") // 10^38
	neg38 := bigSum("-99999999999999999999999999999999999999")
	negTen38 := bigSum("-100000000000000000000000000000000000000")
	tests := []struct {
		s    Sum
		n    int
		want bool
	}{
		{max38, 38, true},
		{ten38, 38, false},
		{neg38, 38, true},
		{negTen38, 38, false},
		{ten38, 39, true},
		{bigSum("-170141183460469231731687303715884105728"), 39, true},
		{bigSum("-170141183460469231731687303715884105728"), 38, false},
		{SumOf(9999), 4, true},
		{SumOf(10000), 4, false},
		{SumOf(-10000), 4, false},
		{SumOf(math.MaxInt64), 19, true},
		{SumOf(math.MinInt64), 19, true},
		{SumOf(math.MinInt64), 18, false},
		{Sum{}, 0, true},
		{SumOf(1), 0, false},
		{SumOf(1), 1, true},
	}
	for _, tc := range tests {
		if got := tc.s.FitsDigits(tc.n); got != tc.want {
			t.Errorf("FitsDigits(%v, %d) = %v, want %v", toBig(tc.s), tc.n, got, tc.want)
		}
	}
	// Every power of ten against big.Int.
	for n := 1; n <= 38; n++ {
		p := new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(n)), nil)
		pm1 := new(big.Int).Sub(p, big.NewInt(1))
		if !bigSum(pm1.String()).FitsDigits(n) || bigSum(p.String()).FitsDigits(n) {
			t.Errorf("FitsDigits wrong at 10^%d", n)
		}
	}
}

func TestParseSum(t *testing.T) {
	tests := []struct {
		in   string
		want string // String of the result; "" when err is set
		err  error
	}{
		{"123.4500", "123.4500", nil},
		{"12.5", "12.5000", nil},
		{"12", "12.0000", nil},
		{"0", "0.0000", nil},
		{"-0", "0.0000", nil},
		{"-0.0000", "0.0000", nil},
		{"-12.3456", "-12.3456", nil},
		{"0.0001", "0.0001", nil},
		{"1.23450000", "1.2345", nil},
		{"0012.5", "12.5000", nil},
		{"17014118346046923173168730371588410.5727", "17014118346046923173168730371588410.5727", nil},
		{"-17014118346046923173168730371588410.5728", "-17014118346046923173168730371588410.5728", nil},
		{"17014118346046923173168730371588410.5728", "", ErrRange},
		{"-17014118346046923173168730371588410.5729", "", ErrRange},
		{"999999999999999999999999999999999999999999", "", ErrRange},
		{"1.23456", "", ErrPrecision},
		{"1.00001", "", ErrPrecision},
		{"", "", ErrSyntax},
		{"-", "", ErrSyntax},
		{".5", "", ErrSyntax},
		{"5.", "", ErrSyntax},
		{"+5", "", ErrSyntax},
		{"1e5", "", ErrSyntax},
		{" 1", "", ErrSyntax},
		{"1.2.3", "", ErrSyntax},
		{"1.00001x", "", ErrSyntax},
		{"NULL", "", ErrSyntax},
	}
	for _, tc := range tests {
		got, err := ParseSum(tc.in)
		if !errors.Is(err, tc.err) {
			t.Errorf("ParseSum(%q) error = %v, want %v", tc.in, err, tc.err)
			continue
		}
		if err == nil && got.String() != tc.want {
			t.Errorf("ParseSum(%q) = %s, want %s", tc.in, got.String(), tc.want)
		}
	}
}

func TestParseSumRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(testenv.Seed(t, "RELAY_TEST_SEED", 3), 4))
	for range 5000 {
		s := Sum{hi: int64(r.Uint64()) >> r.IntN(64), lo: r.Uint64()}
		str := s.String()
		back, err := ParseSum(str)
		if err != nil || back != s {
			t.Fatalf("ParseSum(%s) = %v, %v; want %v", str, toBig(back), err, toBig(s))
		}
		if got := bigUnits(toBig(s)); got != str {
			t.Fatalf("String = %s, big says %s", str, got)
		}
	}
	for _, u := range []int64{0, 1, -1, math.MaxInt64, math.MinInt64} {
		back, err := ParseSum(FormatUnits(u))
		if err != nil || back != SumOf(u) {
			t.Errorf("ParseSum(FormatUnits(%d)) = %v, %v", u, toBig(back), err)
		}
	}
}
