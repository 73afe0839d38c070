// The resolved writer schemas a decoder keeps, by id, each fetched and built once (resolved.of,
// the one way every registry format gets them). Invariant: at most max of them are kept, the
// oldest evicted first (a stream's ids move forward, so the oldest is the least likely to be
// asked for again); an evicted schema costs only its resolution again (the registry client keeps
// the raw schema), never a wrong verdict; and what the registry could not give now is never kept
// as a verdict.

package format

import (
	"context"
	"errors"

	"github.com/confluentinc/confluent-kafka-go/v2/schemaregistry"
)

// resolved holds one decoder's resolved schemas by id. Not safe for concurrent use, as decoders
// are not.
type resolved[T any] struct {
	byID  map[int]T
	order []int
	max   int
	obs   Observer
	// last is the schema of the id asked for last (a run of records nearly always shares one),
	// which get returns without a map lookup; has says last is set.
	lastID int
	last   T
	has    bool
}

// Observer is told what a decoder does with writer schemas (relay's metrics: a steady rate of
// resolutions means more ids in use than a decoder keeps). A nil func is not called.
type Observer struct {
	Resolved func() // a writer schema fetched and resolved against the spec: a miss
	Evicted  func() // a resolved schema dropped to keep the bound
}

// Observe makes d report to o, if d is a registry format's decoder (JSON has no schemas).
func Observe(d Decoder, o Observer) {
	if x, ok := d.(interface{ observe(Observer) }); ok {
		x.observe(o)
	}
}

// defaultResolved is how many resolved schemas a decoder keeps when its caller says 0.
const defaultResolved = 100

func newResolved[T any](max int) resolved[T] {
	if max <= 0 {
		max = defaultResolved
	}
	return resolved[T]{byID: map[int]T{}, max: max}
}

// of is what writer schema id resolves to, fetched from reg and built on first use. build keeps
// its verdict on a schema that cannot be read in the T it returns, and returns an error only when
// there is no verdict yet (noVerdict): then nothing is kept, and the next record asks again.
func (r *resolved[T]) of(ctx context.Context, reg *Registry, id int, build func(schemaregistry.SchemaInfo) (T, error)) (T, error) {
	if s, ok := r.get(id); ok {
		return s, nil
	}
	info, err := reg.Schema(ctx, id)
	if err == nil {
		var s T
		if s, err = build(info); err == nil {
			r.put(id, s)
			return s, nil
		}
	}
	var zero T
	return zero, err
}

// noVerdict says whether err, from building a writer schema, says nothing of the schema: a
// reference the registry could not give now (ErrUnavailable), or the context ended meanwhile.
func noVerdict(ctx context.Context, err error) bool {
	return err != nil && (errors.Is(err, ErrUnavailable) || ctx.Err() != nil)
}

func (r *resolved[T]) get(id int) (T, bool) {
	if r.has && id == r.lastID {
		return r.last, true
	}
	s, ok := r.byID[id]
	if ok {
		r.lastID, r.last, r.has = id, s, true
	}
	return s, ok
}

func (r *resolved[T]) put(id int, s T) {
	if _, ok := r.byID[id]; !ok {
		if len(r.order) >= r.max {
			if r.has && r.lastID == r.order[0] {
				r.has = false // an evicted schema is built again when asked for, as any other
			}
			delete(r.byID, r.order[0])
			r.order = r.order[1:]
			if r.obs.Evicted != nil {
				r.obs.Evicted()
			}
		}
		r.order = append(r.order, id)
		if r.obs.Resolved != nil {
			r.obs.Resolved()
		}
	}
	r.byID[id] = s
}
