package gateway

import (
	"context"
	"sync"
	"sync/atomic"
)

// This file gives the external tests (package gateway_test) hooks into
// the gateway's internals, so that they count what happened instead of
// timing it. It is compiled into the test binary only.

// StatePoll is how often a gateway reads the fleet's runtime state.
const StatePoll = statePoll

// StateReads counts a gateway's reads of the fleet's runtime state: each
// poll of its serial, and at which poll each load of the document began.
type StateReads struct {
	stateBackend
	polls atomic.Int64
	mu    sync.Mutex
	loads []int64
}

// CountStateReads makes g count its reads of the runtime state. Call it
// after New and before Serve (it replaces g's backend, which Serve's
// watch reads); g must keep its state in Redis or a state file.
func CountStateReads(g *Gateway) *StateReads {
	if g.backend == nil {
		panic("CountStateReads: the gateway keeps no runtime state")
	}
	r := &StateReads{stateBackend: g.backend}
	g.backend = r
	return r
}

func (r *StateReads) Serial(ctx context.Context) (int64, error) {
	r.polls.Add(1)
	return r.stateBackend.Serial(ctx)
}

func (r *StateReads) Load(ctx context.Context) (runtimeState, error) {
	r.mu.Lock()
	r.loads = append(r.loads, r.polls.Load())
	r.mu.Unlock()
	return r.stateBackend.Load(ctx)
}

// Polls returns how many polls of the serial have begun.
func (r *StateReads) Polls() int64 { return r.polls.Load() }

// LoadAfter returns the poll that the first load of the document begun
// at or after poll n followed (a load follows the poll that saw the
// serial move), or -1 if none has begun yet.
func (r *StateReads) LoadAfter(n int64) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range r.loads {
		if p >= n {
			return p
		}
	}
	return -1
}
