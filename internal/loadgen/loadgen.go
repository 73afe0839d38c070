// Package loadgen produces synthetic records of a pipeline spec whose exact totals are known.
//
// Invariant: Totals is the spec's own fold (spec.Plan.Fold, the pipeline's) of exactly the records
// of Kafka transactions that committed (an aborted transaction's records must never reach MySQL),
// decoded by the spec's decoder (an Avro, Protobuf or JSON Schema record through the JSON record
// it was made from: avro.go, protobuf.go, jsonschema.go), so it holds what every aggregate table
// must; each bad record is remembered with the reason that decoder gives it (or its bytes alone
// decide). A good record the generator made that the decoder refuses is an error, never a silent
// miscount. Totals also keeps the committed payloads
// themselves (bounded), so a check that shares no code with relay can decode them on its own.
package loadgen

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/relay-sh/relay/internal/config"
	"github.com/relay-sh/relay/internal/format"
	"github.com/relay-sh/relay/internal/spec"
)

// Options shape the load.
type Options struct {
	Brokers   string
	Topic     string
	Orders    int     // records to produce (good + bad)
	Rate      float64 // records per second; 0 means as fast as possible
	Batch     int     // records per Kafka transaction (or per flush when not transactional)
	AbortRate float64 // fraction of transactions aborted on purpose
	BadRate   float64 // fraction of records that are bad input
	// SKUs is the number of distinct values of each field an aggregate groups by (default 100);
	// Distinct overrides it per field, by its name in the spec.
	SKUs     int
	Distinct map[string]int
	Windows  int           // event times fall in this many spans of Window after StartTS
	Window   time.Duration // default one minute
	Seed     uint64        // makes the stream reproducible
	StartTS  int64         // event time of the first span (epoch ms)
	TxnID    string        // transactional.id; empty means a non-transactional producer
	// Plan is the spec the records are made for; nil is the default spec (relay's defaults, as
	// config.Default), whose records are the ones loadgen always made, byte for byte.
	Plan *spec.Plan
	// Escape writes what real producers write, with the same known meaning (spell.go): grouped
	// strings and order ids with non-ASCII text (é, ü, CJK, emoji past the BMP; an NFC and an NFD
	// key of the same visible text), strings raw or \u-escaped (surrogate pairs, "\/", escaped
	// ASCII letters), escaped member names, numbers and times in every spelling the spec accepts,
	// members in any order, any whitespace. Off, the records are the plain ones.
	Escape bool
	// Format is the records' encoding: "" or json, or avro, protobuf or json_schema (Confluent's
	// wire format, the schema registered in Registry under <Topic>-value; Escape is JSON's and
	// refused with them).
	Format   string
	Registry *format.Registry
	// EvolveAfter, in a registry format, registers a second writer schema once that many records
	// were sent (the first with a field added that no spec reads, as BACKWARD compatibility
	// allows) and writes every other record under it: a fleet of producers mid-upgrade.
	EvolveAfter int
	// Progress, if set, gets a line every ProgressEvery (default 5 s) while Run produces: records
	// sent, committed and aborted, the rate and the time left.
	Progress      io.Writer
	ProgressEvery time.Duration
}

// DefaultPlan is the default spec's plan (config.Default's), compiled once.
var DefaultPlan = sync.OnceValue(func() *spec.Plan {
	c := config.Default()
	p, err := c.Plan()
	if err != nil {
		panic("loadgen: the default spec does not compile: " + err.Error())
	}
	return p
})

// Bad is one bad record with the reason relay files it under.
type Bad struct {
	Reason  string
	Payload string
}

// Tables is what the aggregate tables of Plan hold: Rows[a] are aggregate a's rows, sorted by key.
type Tables struct {
	Plan *spec.Plan
	Rows [][]spec.Row
}

// Keys is the number of rows of all tables.
func (x Tables) Keys() int {
	n := 0
	for _, rs := range x.Rows {
		n += len(rs)
	}
	return n
}

// Totals is what relay must produce from what was committed to Kafka.
type Totals struct {
	mu     sync.Mutex
	plan   *spec.Plan // set by the first Run
	dec    *spec.Decoder
	rec    spec.Record
	tables *spec.Tables // the fold of the committed good records
	Bad    []Bad
	// Good counts committed good records, Aborted the records of aborted transactions, Produced
	// every record sent.
	Good, Aborted, Produced int64
	// committed holds the payloads of committed transactions, good and bad, in the order
	// recorded, while they fit keep bytes (see Keep); over is set once one did not.
	committed  [][]byte
	kept, keep int64
	over       bool
}

// DefaultKeep bounds the committed payloads NewTotals keeps: ample for a test's few hundred
// thousand records (the bad kind too_large is 70 kB each), and a bound on a long run's memory.
const DefaultKeep = 256 << 20

// NewTotals returns empty totals that keep up to DefaultKeep bytes of committed payloads; the
// first Run fixes their spec.
func NewTotals() *Totals { return &Totals{keep: DefaultKeep} }

// Keep bounds the bytes of committed payloads the totals keep for Committed (0: none, for a run
// that needs only the fold).
func (t *Totals) Keep(bytes int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.keep = bytes
}

// Committed returns the payloads of every committed record, good and bad, in the order they were
// recorded (one Run's in the order produced), for a check that decodes them on its own. It is an
// error once more were committed than the totals keep.
func (t *Totals) Committed() ([][]byte, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.over {
		return nil, fmt.Errorf("loadgen: the committed payloads passed the %d bytes the totals keep", t.keep)
	}
	return slices.Clone(t.committed), nil
}

// use fixes the totals' plan, refusing a second one: one fold cannot hold two specs' tables.
func (t *Totals) use(p *spec.Plan) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.plan == nil {
		t.plan, t.dec, t.tables = p, p.NewDecoder(), p.NewTables()
	} else if t.plan != p {
		return errors.New("loadgen: these totals hold another spec's records")
	}
	return nil
}

// planLocked is the totals' plan, the default one before any Run (nothing is folded then).
func (t *Totals) planLocked() *spec.Plan {
	if t.plan == nil {
		return DefaultPlan()
	}
	return t.plan
}

type pendingRec struct {
	payload []byte // what is produced
	bad     *Bad   // a bad kind, with the reason the default spec gives it; nil for a good record
	// twin is the JSON record an encoded payload (Avro, JSON Schema) carries the values of: what Totals
	// decodes and folds; nil when the payload is JSON itself.
	twin []byte
	// verdict is the reason a payload's bytes alone decide (too_large, bad_header,
	// unknown_schema: no spec decoder is asked); "" when the decoder decides.
	verdict string
}

// record adds a batch: to the totals when committed (decoded and folded as relay does), to the
// aborted count otherwise.
func (t *Totals) record(recs []pendingRec, committed bool) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.Produced += int64(len(recs))
	if !committed {
		t.Aborted += int64(len(recs))
		return nil
	}
	for _, r := range recs {
		if !t.over {
			if t.kept += int64(len(r.payload)); t.kept <= t.keep {
				t.committed = append(t.committed, r.payload)
			} else {
				t.over, t.committed = true, nil
			}
		}
		if r.verdict != "" {
			t.Bad = append(t.Bad, Bad{Reason: r.verdict, Payload: string(r.payload)})
			continue
		}
		twin := r.payload
		if r.twin != nil {
			twin = r.twin
		}
		reason, field := t.dec.Decode(twin, &t.rec)
		switch {
		case reason != spec.OK && r.bad == nil:
			return fmt.Errorf("loadgen: a generated good record is bad input to the spec (%s, field %q): %s", reason, field, twin)
		case reason != spec.OK:
			t.Bad = append(t.Bad, Bad{Reason: reason.String(), Payload: r.bad.Payload})
		default:
			// A bad kind that this spec accepts (it declares none of the fields the kind breaks)
			// is a good record of it.
			t.plan.Fold(&t.rec, []*spec.Tables{t.tables})
			t.Good++
		}
	}
	return nil
}

// Snapshot copies the totals under the lock: every table's expected rows, the bad records and the
// number of committed good records.
func (t *Totals) Snapshot() (Tables, []Bad, int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.planLocked()
	x := Tables{Plan: p, Rows: make([][]spec.Row, len(p.Tables()))}
	for a := range x.Rows {
		if t.tables == nil {
			continue
		}
		for _, r := range t.tables.Rows(a) {
			x.Rows[a] = append(x.Rows[a], spec.Row{Key: r.Key, Accs: slices.Clone(r.Accs)})
		}
	}
	return x, append([]Bad(nil), t.Bad...), t.Good
}

// Summary says what was produced, for the operator who ran it.
func (t *Totals) Summary() string {
	x, bad, good := t.Snapshot()
	var keys []string
	for a, table := range x.Plan.Tables() {
		keys = append(keys, fmt.Sprintf("%s %d", table, len(x.Rows[a])))
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return fmt.Sprintf("%d records sent: %d good orders committed (keys: %s), %d bad records, %d records in aborted transactions",
		t.Produced, good, strings.Join(keys, ", "), len(bad), t.Aborted)
}
