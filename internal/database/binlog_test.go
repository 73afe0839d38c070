package database

import "testing"

// Only statement format with the binary log on is refused: it cannot log READ COMMITTED writes.
func TestCheckReadCommitted(t *testing.T) {
	for _, c := range []struct {
		b    Binlog
		fail bool
	}{
		{Binlog{On: true, Format: "ROW"}, false},
		{Binlog{On: true, Format: "MIXED"}, false},
		{Binlog{On: true, Format: "STATEMENT"}, true},
		{Binlog{On: true, Format: "statement"}, true},
		{Binlog{On: false, Format: "STATEMENT"}, false},
	} {
		if err := c.b.CheckReadCommitted(); (err != nil) != c.fail {
			t.Errorf("%+v: CheckReadCommitted() = %v, want failure %v", c.b, err, c.fail)
		}
	}
}
