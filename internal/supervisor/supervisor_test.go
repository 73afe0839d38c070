package supervisor

import (
	"context"
	"errors"
	"testing"
	"time"
)

// The first failure is kept, cancels the siblings, and names its component; later ones are dropped.
func TestFirstErrorWins(t *testing.T) {
	g := New(context.Background())
	first := errors.New("boom")
	g.Go("a", func(ctx context.Context) error { return first })
	g.Go("b", func(ctx context.Context) error {
		<-ctx.Done()
		return errors.New("consequence")
	})
	err := g.Wait()
	var se *Error
	if !errors.As(err, &se) || se.Component != "a" || !errors.Is(err, first) {
		t.Fatalf("got %v, want component a failing with boom", err)
	}
	if context.Cause(g.Context()) != err {
		t.Fatalf("context cause %v, want the first error", context.Cause(g.Context()))
	}
}

// Stop ends every component without an error.
func TestStop(t *testing.T) {
	g := New(context.Background())
	g.Go("a", func(ctx context.Context) error { <-ctx.Done(); return nil })
	time.AfterFunc(10*time.Millisecond, g.Stop)
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
}
