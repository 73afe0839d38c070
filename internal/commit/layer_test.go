package commit

import (
	"os/exec"
	"strings"
	"testing"
)

// The protocol sits below the loop, the configuration and the operator commands: it imports none
// of them. (That the ledger, XA and the sink do not import it the compiler says: it imports them.)
func TestLayers(t *testing.T) {
	const mod = "github.com/relay-sh/relay/internal/"
	out, err := exec.Command("go", "list", "-deps", mod+"commit").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	above := map[string]bool{}
	for _, p := range strings.Fields(string(out)) {
		above[p] = true
	}
	for _, p := range []string{"pipeline", "ops", "config", "consumer"} {
		if above[mod+p] {
			t.Errorf("internal/commit depends on internal/%s, which is above it", p)
		}
	}
}
