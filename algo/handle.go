package algo

import (
	"encoding/binary"
	"fmt"
)

// Handle is a limit prepared once, when a policy is compiled or a
// limiter made, for every request that carries it: the name its state is
// stored under, the limit validated, its derived constants and the prefix
// of its keys. A store deciding a request that carries its handle (see
// [Request.Prepared]) neither validates nor prepares the limit again.
// A Handle is immutable and safe for concurrent use.
type Handle struct {
	name     string
	limit    Limit
	prepared Prepared
	prefix   []byte
}

// NewHandle validates l and returns its handle under name.
func NewHandle(name string, l Limit) (*Handle, error) {
	pl, err := l.Prepare()
	if err != nil {
		return nil, fmt.Errorf("preparing limit %q: %w", name, err)
	}
	return &Handle{name: name, limit: l, prepared: pl, prefix: AppendKeyPrefix(nil, l.Algorithm, name)}, nil
}

// Name returns the name the limit's state is stored under.
func (h *Handle) Name() string { return h.name }

// Limit returns the limit.
func (h *Handle) Limit() Limit { return h.limit }

// Prepared returns the limit, prepared.
func (h *Handle) Prepared() *Prepared { return &h.prepared }

// KeyPrefix returns [AppendKeyPrefix] of the limit's algorithm and name:
// what an in-process store's keys under this handle start with. The
// caller must not modify it.
func (h *Handle) KeyPrefix() []byte { return h.prefix }

// Request returns a request of subject, at cost, under the handle: its
// Name and Limit are the handle's, and it carries the handle.
func (h *Handle) Request(subject string, cost int64) Request {
	return Request{Name: h.name, Subject: subject, Limit: h.limit, Cost: cost, Handle: h}
}

// AppendKeyPrefix appends the start of a key of an in-process store: the
// algorithm, then the name, length-prefixed so that no two names share
// bytes.
func AppendKeyPrefix(b []byte, alg Algorithm, name string) []byte {
	b = append(b, byte(alg))
	b = binary.AppendUvarint(b, uint64(len(name)))
	return append(b, name...)
}

// Prepared returns r's handle if r carries one that still describes it
// (r's Name and Limit are the handle's: a caller that changed either
// after taking the request from the handle gets nil, and the store
// validates the request as one without a handle).
func (r *Request) Prepared() *Handle {
	h := r.Handle
	if h == nil || r.Name != h.name || !r.Limit.same(&h.limit) {
		return nil
	}
	return h
}

// same reports whether *l == *o, without a call.
func (l *Limit) same(o *Limit) bool {
	return l.Rate == o.Rate && l.Period == o.Period && l.Algorithm == o.Algorithm && l.Burst == o.Burst &&
		l.MaxDelay == o.MaxDelay && l.Calendar == o.Calendar && l.Zone == o.Zone
}
