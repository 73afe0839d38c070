// Package aggregate folds orders into per-(window, sku) deltas: what `relay verify` recounts the
// default spec with, until it moves to the spec's fold (internal/spec, which the pipeline runs).
//
// Invariants: a key is routed to exactly one subtask (hash of the primary key), so two subtasks never
// write the same row; rows leave a Table sorted in the primary key's byte order, so concurrent
// upserts take row locks in one order and cannot deadlock each other; sums are exact (money.Sum).
package aggregate

import (
	"cmp"
	"encoding/binary"
	"hash/fnv"
	"slices"
	"strings"

	"github.com/relay-sh/relay/internal/money"
)

// Acc is the delta of one key in one epoch.
type Acc struct {
	Count int64
	Sum   money.Sum
}

// Row is one upsert: window start in epoch milliseconds, sku bytes, and the delta.
type Row struct {
	WindowMS int64
	SKU      string
	Acc
}

// Table holds one subtask's deltas of one epoch. The map key is the 8-byte big-endian window
// followed by the sku bytes: byte order of keys equals the order of (window_start, sku binary).
type Table struct {
	m   map[string]*Acc
	key []byte
}

// NewTable returns an empty table.
func NewTable() *Table { return &Table{m: make(map[string]*Acc)} }

// Len is the number of distinct keys.
func (t *Table) Len() int { return len(t.m) }

// Add folds one order in. It allocates only when the key is new.
func (t *Table) Add(windowMS int64, sku []byte, amount int64) {
	t.key = appendKey(t.key[:0], windowMS, sku)
	if a, ok := t.m[string(t.key)]; ok {
		a.Count++
		a.Sum.Add(amount)
		return
	}
	a := &Acc{Count: 1}
	a.Sum.Add(amount)
	t.m[string(t.key)] = a
}

func appendKey(dst []byte, windowMS int64, sku []byte) []byte {
	dst = binary.BigEndian.AppendUint64(dst, uint64(windowMS))
	return append(dst, sku...)
}

// Rows returns the deltas sorted by primary key.
func (t *Table) Rows() []Row {
	rows := make([]Row, 0, len(t.m))
	for k, a := range t.m {
		rows = append(rows, Row{WindowMS: int64(binary.BigEndian.Uint64([]byte(k[:8]))), SKU: k[8:], Acc: *a})
	}
	// Windows are after 1970, so numeric order is the big-endian byte order of the key.
	slices.SortFunc(rows, func(a, b Row) int {
		if c := cmp.Compare(a.WindowMS, b.WindowMS); c != 0 {
			return c
		}
		return strings.Compare(a.SKU, b.SKU)
	})
	return rows
}

// Drain is Rows that also empties the table, so its map can be freed while the rows are written:
// at a flush of a million keys, map and rows would otherwise be live together.
func (t *Table) Drain() []Row {
	rows := t.Rows()
	t.m = make(map[string]*Acc)
	return rows
}

// Window floors an event time to its tumbling window start.
func Window(tsMS, windowMS int64) int64 {
	return tsMS - tsMS%windowMS
}

// Route picks the subtask of a key; FNV-1a keeps it stable across processes and restarts.
func Route(windowMS int64, sku []byte, subtasks int) int {
	if subtasks == 1 {
		return 0
	}
	h := fnv.New64a()
	var w [8]byte
	binary.BigEndian.PutUint64(w[:], uint64(windowMS))
	_, _ = h.Write(w[:])
	_, _ = h.Write(sku)
	return int(h.Sum64() % uint64(subtasks))
}
