package pipeline

import (
	"slices"
	"testing"

	"github.com/relay-sh/relay/internal/ledger"
	"github.com/relay-sh/relay/internal/partition"
)

// moves takes what the member wants and the session does not claim, releases what it claims and
// no longer wants, and moves through both a partition granted anew (held 0) while still claimed.
func TestMoves(t *testing.T) {
	claims := partition.Claims{"t": {0: 3, 1: 4, 2: 5}}
	wants := []ledger.Want{
		{Topic: "t", Partition: 0, Held: 3}, // kept
		{Topic: "t", Partition: 2, Held: 0}, // revoked, then granted again before the session saw it
		{Topic: "t", Partition: 7, Held: 0}, // granted
	}
	add, release := moves(claims, wants)
	slices.SortFunc(add, func(a, b ledger.Want) int { return int(a.Partition - b.Partition) })
	if want := []ledger.Want{{Topic: "t", Partition: 2}, {Topic: "t", Partition: 7}}; !slices.Equal(add, want) {
		t.Errorf("add %v, want %v", add, want)
	}
	if want := (partition.Claims{"t": {1: 4, 2: 5}}); !release.Equal(want) {
		t.Errorf("release %v, want %v", release, want)
	}
	if add, release := moves(claims, []ledger.Want{{Topic: "t", Partition: 0, Held: 3}, {Topic: "t", Partition: 1, Held: 4}, {Topic: "t", Partition: 2, Held: 5}}); len(add) != 0 || release.Len() != 0 {
		t.Errorf("nothing changed, yet add %v release %v", add, release)
	}
}
