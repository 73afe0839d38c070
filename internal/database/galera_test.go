package database

import (
	"testing"

	"github.com/relay-sh/relay/internal/fault"
)

// A Galera node is usable only in the primary component and ready; the refusal is NotPrimary, the
// class start-up and the pipeline wait out. Any other server is never refused.
func TestGaleraErr(t *testing.T) {
	for _, c := range []struct {
		g       Galera
		refused bool
	}{
		{Galera{}, false},
		{Galera{On: false, Status: "non-Primary"}, false},
		{Galera{On: true, Status: "Primary", Ready: true}, false},
		{Galera{On: true, Status: "primary", Ready: true}, false},
		{Galera{On: true, Status: "non-Primary", Ready: false}, true},
		{Galera{On: true, Status: "Disconnected", Ready: false}, true},
		{Galera{On: true, Status: "Primary", Ready: false}, true}, // joining: wsrep_ready OFF
		{Galera{On: true, Status: "non-Primary", Ready: true}, true},
	} {
		err := c.g.Err()
		if (err != nil) != c.refused || (err != nil && (!fault.NotPrimary(err) || !fault.Unavailable(err))) {
			t.Errorf("%+v: Err() = %v, want refused %v (NotPrimary and Unavailable)", c.g, err, c.refused)
		}
	}
}
