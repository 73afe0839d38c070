// The totals file (relay loadgen --totals, relay verify --expected). Invariant: a file is read
// back only against the spec it was written for: every aggregate table of that spec, with its
// columns, must be in it, or ReadFile refuses it.

package loadgen

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/relay-sh/relay/internal/spec"
)

// File is a totals file read back: what relay verify --expected compares MySQL against.
type File struct {
	Tables        Tables
	BadRecords    map[string]int // bad records by the reason relay must give them
	GoodOrders    int64
	AbortedOrders int64
}

// The totals file: counts, then every aggregate table of the spec with its columns (as
// spec.Plan.ColumnNames) and its rows, each the columns' values as MySQL prints them
// (spec.Plan.Format), sorted by primary key.
type fileJSON struct {
	GoodOrders    int64          `json:"good_orders"`
	AbortedOrders int64          `json:"aborted_orders"`
	BadRecords    map[string]int `json:"bad_records"`
	Tables        []fileTable    `json:"tables"`
}

type fileTable struct {
	Table   string     `json:"table"`
	Columns []string   `json:"columns"`
	Rows    [][]string `json:"rows"`
}

// ReadFile reads a totals file written by WriteFile for plan's spec: it must hold every table of
// plan, with plan's columns, and nothing else.
func ReadFile(path string, plan *spec.Plan) (*File, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var j fileJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	f := &File{Tables: Tables{Plan: plan, Rows: make([][]spec.Row, len(plan.Tables()))}, BadRecords: j.BadRecords,
		GoodOrders: j.GoodOrders, AbortedOrders: j.AbortedOrders}
	byName := map[string]fileTable{}
	for _, t := range j.Tables {
		if _, dup := byName[t.Table]; dup {
			return nil, fmt.Errorf("%s: table %s appears twice", path, t.Table)
		}
		byName[t.Table] = t
	}
	for a, table := range plan.Tables() {
		t, ok := byName[table]
		if !ok {
			return nil, fmt.Errorf("%s: no table %s: the file was written for another spec", path, table)
		}
		delete(byName, table)
		key, measures := plan.ColumnNames(a)
		if cols := append(key, measures...); !slices.Equal(t.Columns, cols) {
			return nil, fmt.Errorf("%s: table %s has columns %v, the spec %v", path, table, t.Columns, cols)
		}
		cols := make([][]byte, plan.Columns(a))
		for _, row := range t.Rows {
			if len(row) != len(cols) {
				return nil, fmt.Errorf("%s: table %s: a row of %d columns, want %d", path, table, len(row), len(cols))
			}
			for i, v := range row {
				cols[i] = []byte(v)
			}
			r, err := plan.ParseRow(a, cols)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", path, err)
			}
			f.Tables.Rows[a] = append(f.Tables.Rows[a], r)
		}
		rows := f.Tables.Rows[a]
		slices.SortFunc(rows, func(x, y spec.Row) int { return strings.Compare(x.Key, y.Key) })
		for i := 1; i < len(rows); i++ {
			if rows[i].Key == rows[i-1].Key {
				return nil, fmt.Errorf("%s: table %s lists one key twice", path, table)
			}
		}
	}
	if len(byName) > 0 {
		return nil, fmt.Errorf("%s: tables %s are not in the spec: the file was written for another spec",
			path, strings.Join(slices.Sorted(maps.Keys(byName)), ", "))
	}
	return f, nil
}

// WriteFile stores the expected totals as JSON, every table sorted by key, for `relay verify
// --expected` and people.
func (t *Totals) WriteFile(path string) error {
	x, bad, good := t.Snapshot()
	j := fileJSON{GoodOrders: good, BadRecords: map[string]int{}, Tables: []fileTable{}}
	for _, b := range bad {
		j.BadRecords[b.Reason]++
	}
	for a, table := range x.Plan.Tables() {
		key, measures := x.Plan.ColumnNames(a)
		ft := fileTable{Table: table, Columns: append(key, measures...), Rows: [][]string{}}
		for _, r := range x.Rows[a] {
			cols, err := x.Plan.Format(a, r)
			if err != nil {
				return err
			}
			ft.Rows = append(ft.Rows, cols)
		}
		j.Tables = append(j.Tables, ft)
	}
	t.mu.Lock()
	j.AbortedOrders = t.Aborted
	t.mu.Unlock()
	b, err := json.MarshalIndent(j, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}
