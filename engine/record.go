package engine

import (
	"context"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// A Record is one call as the engine's recording keeps it, enough to
// decide it again under another policy (package simulate): when, which
// route, who under which plan, at what cost, and what became of it.
// Nothing in it is secret: subjects, tenants, client groups, accounts and
// limit keys are the pseudonyms the store keys hold already, and no raw
// header, token, claim or path is kept; the one request value kept is a
// token call's model, bounded (TokenRecord).
type Record struct {
	T         int64     `json:"t"`               // Unix ms
	Route     string    `json:"route,omitempty"` // the route's name; "" for none
	Kind      string    `json:"kind"`            // the subject's kind
	Subject   string    `json:"subject"`
	Plan      string    `json:"plan,omitempty"`
	Tenant    string    `json:"tenant,omitempty"`
	Client    string    `json:"client,omitempty"`
	Unlimited bool      `json:"unlimited,omitempty"`
	Key       KeyStatus `json:"key,omitempty"`
	JWT       bool      `json:"jwt,omitempty"`
	Cost      int64     `json:"cost,omitempty"` // the call's own cost, if it set one
	Account   string    `json:"account,omitempty"`
	LimitKey  string    `json:"limit_key,omitempty"`
	Outcome   string    `json:"outcome"`
	// Status is a login route's answer (zero: none, or not a login).
	Status int `json:"status,omitempty"`
	// Tokens, for a token call (Call.Tokens), is its estimate and what
	// it settled at; nil for any other call (and in recordings older
	// than token budgets).
	Tokens *TokenRecord `json:"tokens,omitempty"`
}

// A TokenRecord is what a Record keeps of a token call: its estimate
// and, once the call ended (Verdict.Done), what it settled at.
type TokenRecord struct {
	Input  int64 `json:"input"`
	Output int64 `json:"output"`
	// Model is the request's model, a request value kept as sent: a
	// candidate's budgets name models. One longer than a policy can name
	// (maxRecordedModel) is dropped, kept as "": no budget's models can
	// hold either, so the replay charges it as the gateway did, where a
	// truncated name could match a model of that length.
	Model string `json:"model,omitempty"`
	// Settled is what the call settled at once it ended: "" before (a
	// record is written when the call is decided; a refused call never
	// ends), SettledEstimate when its response reported no usage (or one
	// not believed, Usage.Impossible), SettledUsage at Usage. It is what
	// a store that answers settles at: a call the fallback decided, or
	// whose settle the store failed, kept its estimate, and is recorded
	// at its usage all the same.
	Settled string `json:"settled,omitempty"`
	// Usage, for SettledUsage, is what the response reported, before any
	// tokens.max_usage cap (a replay applies its own policy's).
	Usage RecordUsage `json:"usage,omitzero"`
}

// RecordUsage is a token call's usage as a TokenRecord keeps it (see
// Usage).
type RecordUsage struct {
	Input     int64 `json:"input"`
	Output    int64 `json:"output"`
	TotalOnly bool  `json:"total_only,omitempty"`
}

// What a TokenRecord's call settled at.
const (
	SettledEstimate = "estimate"
	SettledUsage    = "usage"
)

// Used returns the usage t's call reported, as Verdict.Used takes it: a
// call that reported none (or has not ended) settles at its estimate.
func (t *TokenRecord) Used() Usage {
	if t.Settled != SettledUsage {
		return Usage{}
	}
	return Usage{Input: t.Usage.Input, Output: t.Usage.Output, TotalOnly: t.Usage.TotalOnly, Reported: true}
}

// maxRecordedModel is the longest model a record keeps, in bytes: the
// longest a policy's budgets can name (policy's maxModelName).
const maxRecordedModel = 256

// DefaultRecordSize is how many calls a gateway records.
const DefaultRecordSize = 20_000

// A Recording is a bounded ring of recent calls, of one subject in every
// sample (chosen by a hash of the subject's pseudonym: a sampled
// subject's calls are all kept, so its budgets replay exactly). Engines
// record into the one their Options name; a gateway keeps one across
// policy reloads. Every call takes the next sequence number and writes
// its record into one of recordShards rings by it, under that ring's
// lock, so concurrent calls rarely wait for each other.
type Recording struct {
	seq    atomic.Uint64 // calls recorded so far
	sample uint32
	shards [recordShards]recordShard
}

// recordShards is how many rings a Recording spreads its calls over.
const recordShards = 16

type recordShard struct {
	mu   sync.Mutex
	ring []Record // slot (seq / recordShards) % len holds call seq
	seqs []uint64 // the sequence number of each slot's record, 0 if none
}

// NewRecording returns a recording of about size calls (the last ones),
// of one subject in every sample (1 or less: every subject).
func NewRecording(size, sample int) *Recording {
	r := &Recording{sample: uint32(max(1, sample))}
	per := max(1, (size+recordShards-1)/recordShards)
	for i := range r.shards {
		r.shards[i].ring = make([]Record, per)
		r.shards[i].seqs = make([]uint64, per)
	}
	return r
}

// sampled reports whether subject's calls are recorded (FNV-1a of the
// subject, without allocating).
func (r *Recording) sampled(subject string) bool {
	if r.sample == 1 {
		return true
	}
	h := uint32(2166136261)
	for i := 0; i < len(subject); i++ {
		h = (h ^ uint32(subject[i])) * 16777619
	}
	return h%r.sample == 0
}

// slot returns the ring and slot of call seq.
func (r *Recording) slot(seq uint64) (*recordShard, int) {
	sh := &r.shards[seq%recordShards]
	return sh, int(seq / recordShards % uint64(len(sh.ring)))
}

// add records c and its verdict, and returns the record's sequence number
// (zero when not recorded).
func (r *Recording) add(t time.Time, c Call, v *Verdict) uint64 {
	if !r.sampled(c.Subject.ID) {
		return 0
	}
	rec := Record{T: t.UnixMilli(), Kind: c.Subject.Kind, Subject: c.Subject.ID, Tenant: c.Subject.Tenant, Client: c.Subject.Client,
		Unlimited: c.Subject.Unlimited, Key: c.Key, JWT: c.JWT, Cost: c.Cost, Account: c.Account, LimitKey: c.LimitKey, Outcome: v.Outcome.String()}
	if c.Route != nil {
		rec.Route = c.Route.Name
	}
	if c.Subject.Plan != nil {
		rec.Plan = c.Subject.Plan.Name
	}
	if t := c.Tokens; t != nil {
		rec.Tokens = &TokenRecord{Input: t.Input, Output: t.Output}
		if len(t.Model) <= maxRecordedModel {
			rec.Tokens.Model = t.Model
		}
	}
	seq := r.seq.Add(1)
	sh, i := r.slot(seq)
	sh.mu.Lock()
	if seq > sh.seqs[i] { // a slower call must not overwrite a newer record
		sh.ring[i], sh.seqs[i] = rec, seq
	}
	sh.mu.Unlock()
	return seq
}

// answered sets the status of record seq, the first time, if the ring
// still holds it.
func (r *Recording) answered(seq uint64, status int) {
	if seq == 0 {
		return
	}
	sh, i := r.slot(seq)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.seqs[i] == seq && sh.ring[i].Status == 0 {
		sh.ring[i].Status = status
	}
}

// settled notes what the token call of record seq settled at, the first
// time, if the ring still holds it.
func (r *Recording) settled(seq uint64, u Usage) {
	sh, i := r.slot(seq)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	t := sh.ring[i].Tokens
	if sh.seqs[i] != seq || t == nil || t.Settled != "" {
		return
	}
	if !u.Reported || u.Impossible || u.Input < 0 || u.Output < 0 {
		t.Settled = SettledEstimate // as tokenHold.settle keeps it
		return
	}
	t.Settled, t.Usage = SettledUsage, RecordUsage{Input: u.Input, Output: u.Output, TotalOnly: u.TotalOnly}
}

// Records returns the recorded calls, oldest first.
func (r *Recording) Records() []Record {
	type numbered struct {
		seq uint64
		rec Record
	}
	var all []numbered
	for i := range r.shards {
		sh := &r.shards[i]
		sh.mu.Lock()
		for j, seq := range sh.seqs {
			if seq != 0 {
				rec := sh.ring[j]
				if rec.Tokens != nil { // a copy: settled writes the ring's
					t := *rec.Tokens
					rec.Tokens = &t
				}
				all = append(all, numbered{seq, rec})
			}
		}
		sh.mu.Unlock()
	}
	sort.Slice(all, func(i, j int) bool { return all[i].seq < all[j].seq })
	out := make([]Record, len(all))
	for i, n := range all {
		out[i] = n.rec
	}
	return out
}

// record keeps c and its verdict in the recording, if there is one.
func (e *Engine) record(c Call, v *Verdict) {
	if e.opts.Recording == nil {
		return
	}
	t := time.Now()
	if e.opts.Now != nil {
		t = e.opts.Now()
	}
	v.recSeq = e.opts.Recording.add(t, c, v)
	if v.recSeq != 0 && c.Tokens != nil && v.tokens == nil && v.Outcome.Admitted() {
		// No token budget to settle, but its usage is recorded for a
		// candidate's: Used keeps it, Done records it.
		v.tokens = &tokenHold{e: e, route: c.Route, tokens: *c.Tokens}
	}
}

// recordAnswer notes a login route's answer in the call's record.
func (v *Verdict) recordAnswer(_ context.Context, status int) {
	if v.e != nil && v.e.opts.Recording != nil && v.recSeq != 0 {
		v.e.opts.Recording.answered(v.recSeq, status)
	}
}

// recordSettle notes, in a token call's record, what it settled at.
func (v *Verdict) recordSettle(u Usage) {
	if v.recSeq != 0 {
		v.e.opts.Recording.settled(v.recSeq, u)
	}
}

// storeSpan starts the span of one store call named name (a constant:
// "tollgate.store Allow", ...) charging n requests, the first under
// budget, as a child of the span in ctx, and returns the context to call
// the store with. Without a tracer it returns ctx and a nil span, and
// costs nothing.
func (e *Engine) storeSpan(ctx context.Context, name, budget string, n int) (context.Context, trace.Span) {
	if e.tracer == nil {
		return ctx, nil
	}
	return e.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("tollgate.budget", budget), attribute.Int("tollgate.requests", n)))
}

// endStoreSpan ends span (nil: none) with the call's outcome (allowed,
// refused, done), or error and the error when the store failed.
func endStoreSpan(span trace.Span, outcome string, err error) {
	if span == nil {
		return
	}
	if err != nil {
		span.SetAttributes(attribute.String("tollgate.outcome", "error"))
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	} else {
		span.SetAttributes(attribute.String("tollgate.outcome", outcome))
	}
	span.End()
}

// allowedOr is "allowed" if ok, else "refused".
func allowedOr(ok bool) string {
	if ok {
		return "allowed"
	}
	return "refused"
}
