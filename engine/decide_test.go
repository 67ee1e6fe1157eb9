package engine_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/tollgate/tollgate/engine"
	"github.com/tollgate/tollgate/internal/decidetest"
	"github.com/tollgate/tollgate/internal/redistest"
)

// TestDecide runs the engine's table (package internal/decidetest) on
// Decide, over the memory store and a real Redis: a request in, its
// answer out, the same on both.
func TestDecide(t *testing.T) {
	srv := redistest.Start(t)
	stores := decidetest.Stores(srv)
	for name, newStore := range stores {
		t.Run(name, func(t *testing.T) {
			decidetest.Run(t, decidetest.Cases, newStore, func(t *testing.T, f decidetest.Front) (func(decidetest.Call) decidetest.Answer, func()) {
				e, err := engine.New(engine.Options{Policy: f.Policy, Store: f.Store, Now: decidetest.Clock})
				if err != nil {
					t.Fatal(err)
				}
				return engineFront(e, f.RequireRoute)
			})
		})
	}
}

// engineFront answers the table's calls with e.Decide, settling each as
// its service answered and ending it unless it is held.
func engineFront(e *engine.Engine, requireRoute bool) (func(decidetest.Call) decidetest.Answer, func()) {
	ctx := context.Background()
	var held []*engine.Verdict
	call := func(c decidetest.Call) decidetest.Answer {
		req := decidetest.Request(c)
		req.RequireRoute = requireRoute
		v := e.Decide(ctx, req)
		if v.Outcome.Admitted() {
			v.Answered(ctx, max(c.Status, http.StatusOK))
			if c.Hold {
				held = append(held, v)
			} else {
				v.Done(ctx)
			}
		}
		return decidetest.AnswerOf(v)
	}
	end := func() {
		for _, v := range held {
			v.Done(ctx)
		}
	}
	return call, end
}
