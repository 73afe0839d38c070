// FuzzParse holds Parse to a math/big reference: same verdict, same units.

package money

import (
	"errors"
	"math"
	"math/big"
	"regexp"
	"strings"
	"testing"
)

var refGrammar = regexp.MustCompile(`^(-?)([0-9]+)(?:\.([0-9]+))?(?:[eE]([+-]?[0-9]+))?$`)

var (
	bigMaxInt64 = big.NewInt(math.MaxInt64)
	bigMinInt64 = big.NewInt(math.MinInt64)
	bigTen      = big.NewInt(10)
)

// refParse is the specification of Parse written with math/big: slow and
// obviously exact. Small exponents go through big.Rat; huge ones, which
// big.Rat would try to expand into gigantic numbers, are decided by where the
// last non-zero digit lands.
func refParse(s string) (int64, error) {
	m := refGrammar.FindStringSubmatch(s)
	if m == nil {
		return 0, ErrSyntax
	}
	exp := new(big.Int)
	if m[4] != "" {
		if _, ok := exp.SetString(m[4], 10); !ok {
			panic("big.Int rejected exponent of " + s)
		}
	}
	var units *big.Int
	if exp.IsInt64() && exp.Int64() > -10000 && exp.Int64() < 10000 {
		r, ok := new(big.Rat).SetString(s)
		if !ok {
			panic("big.Rat rejected " + s)
		}
		r.Mul(r, new(big.Rat).SetInt64(10000))
		if !r.IsInt() {
			return 0, ErrPrecision
		}
		units = r.Num()
	} else {
		// value = digits * 10^(exp - len(frac)); strip the trailing zeros of
		// digits into the exponent, then the units exponent k decides.
		mant := strings.TrimRight(m[2]+m[3], "0")
		if strings.TrimLeft(mant, "0") == "" {
			return 0, nil
		}
		zeros := len(m[2]) + len(m[3]) - len(mant)
		k := new(big.Int).Add(exp, big.NewInt(int64(Scale+zeros-len(m[3]))))
		if k.Sign() < 0 {
			return 0, ErrPrecision
		}
		if k.Cmp(big.NewInt(40)) > 0 {
			return 0, ErrRange
		}
		units, _ = new(big.Int).SetString(mant, 10)
		units.Mul(units, new(big.Int).Exp(bigTen, k, nil))
		if m[1] == "-" {
			units.Neg(units)
		}
	}
	if units.Cmp(bigMaxInt64) > 0 || units.Cmp(bigMinInt64) < 0 {
		return 0, ErrRange
	}
	return units.Int64(), nil
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"12.34", "-0", "1.5e2", "12345e-4", "0.00001", "922337203685477.5807",
		"-922337203685477.5808", "1e15", "1.", ".5", "+1", "1e-99999999999999999999", "0e99999999999999"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := Parse(b)
		want, wantErr := refParse(string(b))
		if !errors.Is(err, wantErr) || got != want {
			t.Fatalf("Parse(%q) = %d, %v; reference says %d, %v", b, got, err, want, wantErr)
		}
		if err != nil {
			return
		}
		back, err := Parse([]byte(FormatUnits(got)))
		if err != nil || back != got {
			t.Fatalf("Parse(FormatUnits(%d) = %q) = %d, %v", got, FormatUnits(got), back, err)
		}
		sum, err := ParseSum(FormatUnits(got))
		if err != nil || sum != SumOf(got) {
			t.Fatalf("ParseSum(FormatUnits(%d)) = %v, %v", got, sum, err)
		}
	})
}
