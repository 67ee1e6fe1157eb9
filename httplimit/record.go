package httplimit

import (
	"context"
	"time"

	"github.com/tollgate/tollgate/engine"
)

// Record is what the middleware learned of a request, for an access log
// or metrics: a handler in front of the middleware puts one in the
// request's context (WithRecord), and reads it once the request has been
// served. Fields the request never reached stay empty.
type Record struct {
	Route, Group string // the route matched (Group "unmatched" for none)
	SubjectKind  string // "key", "user", "ip" or "custom"
	Subject      string // the subject's pseudonym
	Outcome      string // the engine's outcome: allowed, refused, fail_open, fail_closed, invalid
	Budget       string // the budget reported in RateLimit (or that refused)
	Decision     time.Duration
	// Upstream is the time the service behind took, set by whoever calls
	// it (the gateway).
	Upstream time.Duration
}

type recordKey struct{}

// WithRecord returns ctx carrying rec, for the middleware to fill in.
func WithRecord(ctx context.Context, rec *Record) context.Context {
	return context.WithValue(ctx, recordKey{}, rec)
}

// RecordFrom returns the Record in ctx, if any.
func RecordFrom(ctx context.Context) (*Record, bool) {
	rec, ok := ctx.Value(recordKey{}).(*Record)
	return rec, ok
}

// fill sets what the verdict v, reached in decision, says of the
// request.
func (rec *Record) fill(v *engine.Verdict, decision time.Duration) {
	rec.Decision = decision
	rec.Group, rec.SubjectKind, rec.Subject, rec.Outcome = v.Call.Group(), v.Identity.Kind, v.Identity.ID, v.Outcome.String()
	if v.Call.Route != nil {
		rec.Route = v.Call.Route.Name
	}
	if c, ok := v.Reported(); ok {
		rec.Budget = c.Budget.Name
	}
}
