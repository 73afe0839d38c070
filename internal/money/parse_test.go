// Parse and FormatUnits are checked against hand-computed units for every
// grammar rule, error and int64 boundary.

package money

import (
	"errors"
	"math"
	"strconv"
	"testing"
)

func TestParse(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		err  error
	}{
		// Plain decimals.
		{"0", 0, nil},
		{"1", 10000, nil},
		{"12.34", 123400, nil},
		{"1.2345", 12345, nil},
		{"-1.2345", -12345, nil},
		{"0.0001", 1, nil},
		{"-0.0001", -1, nil},
		{"-0", 0, nil},
		{"-0.0000", 0, nil},
		{"007.5", 75000, nil},
		{"00000000000000000000000000000000001", 10000, nil},
		// Trailing zeros beyond the scale carry no information.
		{"1.50000", 15000, nil},
		{"1.00000000000000000000000000000", 10000, nil},
		// Exponents, applied exactly.
		{"1.5e2", 1500000, nil},
		{"1.5E2", 1500000, nil},
		{"1.5e+2", 1500000, nil},
		{"12345e-4", 12345, nil},
		{"12345E-4", 12345, nil},
		{"1e-4", 1, nil},
		{"1e0", 10000, nil},
		{"1e-0", 10000, nil},
		{"10e-5", 1, nil},
		{"100000e-9", 1, nil},
		{"0.00001e1", 1, nil},
		{"0e999999999999999999999999", 0, nil},
		{"0e-999999999999999999999999", 0, nil},
		{"0.000000e5", 0, nil},
		{"1e14", 1e18, nil},
		{"-1e14", -1e18, nil},
		{"12.3400e001", 1234000, nil},
		// Boundaries: the units span all of int64.
		{"922337203685477.5807", math.MaxInt64, nil},
		{"-922337203685477.5808", math.MinInt64, nil},
		{"9223372036854775807e-4", math.MaxInt64, nil},
		{"-9223372036854775808e-4", math.MinInt64, nil},
		{"0.9223372036854775807e15", math.MaxInt64, nil},
		{"922337203685477.58070000", math.MaxInt64, nil},
		{"922337203685477.5808", 0, ErrRange},
		{"-922337203685477.5809", 0, ErrRange},
		{"9223372036854775808e-4", 0, ErrRange},
		{"1e15", 0, ErrRange},
		{"1e9999999999999999999999999", 0, ErrRange},
		{"99999999999999999999999999999999", 0, ErrRange},
		{"18446744073709551616", 0, ErrRange},
		{"184467440737095516160000e-4", 0, ErrRange},
		// Precision: a non-zero digit below 10^-4.
		{"0.00001", 0, ErrPrecision},
		{"1.23456", 0, ErrPrecision},
		{"-1.23451", 0, ErrPrecision},
		{"1e-5", 0, ErrPrecision},
		{"12345e-5", 0, ErrPrecision},
		{"1.5e-4", 0, ErrPrecision},
		{"1e-9999999999999999999999", 0, ErrPrecision},
		{"0.000000000000000000000000001", 0, ErrPrecision},
		// Both too large and too precise: precision wins (documented).
		{"99999999999999999999.00001", 0, ErrPrecision},
		// Syntax.
		{"", 0, ErrSyntax},
		{"-", 0, ErrSyntax},
		{".", 0, ErrSyntax},
		{"1.", 0, ErrSyntax},
		{".5", 0, ErrSyntax},
		{"-.5", 0, ErrSyntax},
		{"+1", 0, ErrSyntax},
		{"--1", 0, ErrSyntax},
		{" 1", 0, ErrSyntax},
		{"1 ", 0, ErrSyntax},
		{"1\n", 0, ErrSyntax},
		{"1e", 0, ErrSyntax},
		{"1e+", 0, ErrSyntax},
		{"1e-", 0, ErrSyntax},
		{"e5", 0, ErrSyntax},
		{"1.e5", 0, ErrSyntax},
		{"1e5.5", 0, ErrSyntax},
		{"1ee5", 0, ErrSyntax},
		{"0x10", 0, ErrSyntax},
		{"1_000", 0, ErrSyntax},
		{"1,5", 0, ErrSyntax},
		{"1.2.3", 0, ErrSyntax},
		{"inf", 0, ErrSyntax},
		{"Inf", 0, ErrSyntax},
		{"NaN", 0, ErrSyntax},
		{"nan", 0, ErrSyntax},
		{"Infinity", 0, ErrSyntax},
		{"\"1\"", 0, ErrSyntax},
		{"1\x00", 0, ErrSyntax},
		{"١", 0, ErrSyntax}, // Arabic-Indic digit one
		// Syntax is checked before precision and range.
		{"1.00001x", 0, ErrSyntax},
		{"1e999x", 0, ErrSyntax},
	}
	for _, tc := range tests {
		got, err := Parse([]byte(tc.in))
		if !errors.Is(err, tc.err) || (tc.err == nil && got != tc.want) {
			t.Errorf("Parse(%q) = %d, %v; want %d, %v", tc.in, got, err, tc.want, tc.err)
		}
		if err != nil && got != 0 {
			t.Errorf("Parse(%q) returned %d alongside an error", tc.in, got)
		}
	}
}

func TestFormatUnits(t *testing.T) {
	tests := []struct {
		in   int64
		want string
	}{
		{0, "0.0000"},
		{1, "0.0001"},
		{-1, "-0.0001"},
		{12345, "1.2345"},
		{-12345, "-1.2345"},
		{10000, "1.0000"},
		{123400, "12.3400"},
		{99999, "9.9999"},
		{100000, "10.0000"},
		{math.MaxInt64, "922337203685477.5807"},
		{math.MinInt64, "-922337203685477.5808"},
	}
	for _, tc := range tests {
		if got := FormatUnits(tc.in); got != tc.want {
			t.Errorf("FormatUnits(%d) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestFormatRoundTrip pins the property the sink relies on: whatever is
// formatted parses back to the same units.
func TestFormatRoundTrip(t *testing.T) {
	vals := []int64{0, 1, -1, 9, 10, 9999, 10000, 10001, math.MaxInt64, math.MinInt64, math.MaxInt64 - 1, math.MinInt64 + 1}
	for p := int64(1); p > 0 && p < math.MaxInt64/10; p *= 10 {
		vals = append(vals, p, -p, p-1, -(p - 1), p+1)
	}
	for _, u := range vals {
		s := FormatUnits(u)
		got, err := Parse([]byte(s))
		if err != nil || got != u {
			t.Errorf("Parse(FormatUnits(%d) = %q) = %d, %v", u, s, got, err)
		}
		// Cross-check the digits against strconv, which knows nothing of scales.
		mag := strconv.FormatUint(uint64(u), 10)
		if u < 0 {
			mag = strconv.FormatUint(-uint64(u), 10)
		}
		for len(mag) <= Scale {
			mag = "0" + mag
		}
		want := mag[:len(mag)-Scale] + "." + mag[len(mag)-Scale:]
		if u < 0 {
			want = "-" + want
		}
		if s != want {
			t.Errorf("FormatUnits(%d) = %q, want %q", u, s, want)
		}
	}
}

func TestAppendUnitsNoAlloc(t *testing.T) {
	buf := make([]byte, 0, 32)
	allocs := testing.AllocsPerRun(100, func() {
		buf = AppendUnits(buf[:0], math.MinInt64)
	})
	if allocs != 0 {
		t.Fatalf("AppendUnits allocated %v times per call", allocs)
	}
	if string(buf) != "-922337203685477.5808" {
		t.Fatalf("AppendUnits = %q", buf)
	}
	pre := AppendUnits([]byte("x="), 5)
	if string(pre) != "x=0.0005" {
		t.Fatalf("AppendUnits kept prefix wrong: %q", pre)
	}
}

func TestParseNoAlloc(t *testing.T) {
	inputs := [][]byte{[]byte("12.34"), []byte("1.5e2"), []byte("x"), []byte("1e99"), []byte("0.00001")}
	for _, in := range inputs {
		allocs := testing.AllocsPerRun(100, func() { _, _ = Parse(in) })
		if allocs != 0 {
			t.Errorf("Parse(%q) allocated %v times", in, allocs)
		}
	}
}

// TestTenMillionDimes is the classic float failure: 0.1 added 10^7 times.
func TestTenMillionDimes(t *testing.T) {
	dime, err := Parse([]byte("0.1"))
	if err != nil {
		t.Fatal(err)
	}
	var s Sum
	var plain int64
	for range 10_000_000 {
		s.Add(dime)
		plain += dime
	}
	if got := s.String(); got != "1000000.0000" {
		t.Fatalf("Sum of 10^7 * 0.1 = %s", got)
	}
	if got := FormatUnits(plain); got != "1000000.0000" {
		t.Fatalf("int64 sum of 10^7 * 0.1 = %s", got)
	}
}

var sink int64

func BenchmarkParse(b *testing.B) {
	for _, in := range []string{"12.34", "-922337203685477.5808", "1.5e2"} {
		buf := []byte(in)
		b.Run(in, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(buf)))
			for b.Loop() {
				u, err := Parse(buf)
				if err != nil {
					b.Fatal(err)
				}
				sink += u
			}
		})
	}
}

func BenchmarkAppendUnits(b *testing.B) {
	b.ReportAllocs()
	buf := make([]byte, 0, 32)
	for b.Loop() {
		buf = AppendUnits(buf[:0], 123400)
	}
}
