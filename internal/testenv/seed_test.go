package testenv

import (
	"math/rand/v2"
	"testing"
)

// A seed given back through the environment replays the same draws; unset, the default is used;
// the replay pattern selects exactly the (sub)test.
func TestSeedReplays(t *testing.T) {
	draws := func(seed uint64) [3]uint64 {
		r := rand.New(rand.NewPCG(seed, 1))
		return [3]uint64{r.Uint64(), r.Uint64(), r.Uint64()}
	}
	t.Setenv("RELAY_TEST_SEED", "")
	if s := Seed(t, "RELAY_TEST_SEED", 7); s != 7 {
		t.Fatalf("unset: seed %d, want the default 7", s)
	}
	t.Setenv("RELAY_TEST_SEED", "123456789")
	if s := Seed(t, "RELAY_TEST_SEED", 7); s != 123456789 || draws(s) != draws(123456789) {
		t.Fatalf("RELAY_TEST_SEED=123456789: seed %d, draws %v", s, draws(s))
	}
	if p := runPattern("TestA/sub.1"); p != `^TestA$/^sub\.1$` {
		t.Fatalf("run pattern %s", p)
	}
	if d := pkgDir(); d != "./internal/testenv/" {
		t.Fatalf("package directory %s", d)
	}
}
