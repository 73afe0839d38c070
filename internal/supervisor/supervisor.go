// Package supervisor runs a process's components under one fatal path.
//
// Invariant: the first component error is kept and cancels the shared context; later errors are
// consequences and are dropped. Wait returns only when every component has returned.
package supervisor

import (
	"context"
	"sync"
)

// Group runs components that share a context.
type Group struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	wg     sync.WaitGroup
	once   sync.Once
	err    error
}

// New returns a group whose context ends with parent or with the first failure.
func New(parent context.Context) *Group {
	ctx, cancel := context.WithCancelCause(parent)
	return &Group{ctx: ctx, cancel: cancel}
}

// Context is the shared context.
func (g *Group) Context() context.Context { return g.ctx }

// Go starts a component. A nil return means the component finished its work normally.
func (g *Group) Go(name string, fn func(ctx context.Context) error) {
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		if err := fn(g.ctx); err != nil {
			g.once.Do(func() {
				g.err = &Error{Component: name, Err: err}
				g.cancel(g.err)
			})
		}
	}()
}

// Stop cancels the shared context without an error (a clean shutdown).
func (g *Group) Stop() { g.cancel(nil) }

// Wait blocks until every component returned, and gives the first failure.
func (g *Group) Wait() error {
	g.wg.Wait()
	g.cancel(nil)
	return g.err
}

// Error names the component that failed first.
type Error struct {
	Component string
	Err       error
}

func (e *Error) Error() string { return e.Component + ": " + e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }
