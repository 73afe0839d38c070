package ledger

import (
	"context"
	"database/sql"
	"testing"

	"github.com/relay-sh/relay/internal/partition"
)

// recorder is an Execer that keeps the arguments of the statement it was given.
type recorder struct{ args []any }

func (r *recorder) ExecContext(_ context.Context, _ string, args ...any) (sql.Result, error) {
	r.args = args
	return nil, nil
}

func (r *recorder) QueryRowContext(context.Context, string, ...any) *sql.Row { return nil }

// The offset rows of one upsert go in primary-key order, so two transactions writing overlapping
// partitions (held-mode instances, a NewSession's locking read) lock them in the same order.
func TestWriteOffsetsKeyOrder(t *testing.T) {
	offs := partition.Offsets{}
	for _, topic := range []string{"b", "a", "c"} {
		for p := int32(0); p < 40; p++ {
			offs.Set(topic, p, int64(p))
		}
	}
	var r recorder
	if err := New(nil, "j").writeOffsets(context.Background(), &r, 1, offs); err != nil {
		t.Fatal(err)
	}
	const cols = 6 // job, topic, kpartition, next_offset, checkpoint_id, owner_key
	prevT, prevP := "", int32(-1)
	for i := 0; i < len(r.args); i += cols {
		topic, p := r.args[i+1].(string), r.args[i+2].(int32)
		if topic < prevT || (topic == prevT && p <= prevP) {
			t.Fatalf("row %d is %s[%d], after %s[%d]: not in key order", i/cols, topic, p, prevT, prevP)
		}
		prevT, prevP = topic, p
	}
}
