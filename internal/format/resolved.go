// The resolved writer schemas a decoder keeps, by id. Invariant: at most max of them are kept,
// the oldest evicted first (a stream's ids move forward, so the oldest is the least likely to be
// asked for again), and an evicted schema costs only its resolution again (the registry client
// keeps the raw schema), never a wrong verdict.

package format

// resolved holds one decoder's resolved schemas by id. Not safe for concurrent use, as decoders
// are not.
type resolved[T any] struct {
	byID  map[int]T
	order []int
	max   int
}

// defaultResolved is how many resolved schemas a decoder keeps when its caller says 0.
const defaultResolved = 100

func newResolved[T any](max int) resolved[T] {
	if max <= 0 {
		max = defaultResolved
	}
	return resolved[T]{byID: map[int]T{}, max: max}
}

func (r *resolved[T]) get(id int) (T, bool) {
	s, ok := r.byID[id]
	return s, ok
}

func (r *resolved[T]) put(id int, s T) {
	if _, ok := r.byID[id]; !ok {
		if len(r.order) >= r.max {
			delete(r.byID, r.order[0])
			r.order = r.order[1:]
		}
		r.order = append(r.order, id)
	}
	r.byID[id] = s
}
