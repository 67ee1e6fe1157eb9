package engine

import (
	"context"
	"hash/fnv"
	"sync"
	"time"
)

// A Record is one call as the engine's recording keeps it, enough to
// decide it again under another policy (package simulate): when, which
// route, who under which plan, at what cost, and what became of it.
// Nothing in it is secret: subjects, tenants, client groups, accounts and
// limit keys are the pseudonyms the store keys hold already, and no raw
// header, token, claim or path is kept.
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
}

// DefaultRecordSize is how many calls a gateway records.
const DefaultRecordSize = 20_000

// A Recording is a bounded ring of recent calls, of one subject in every
// sample (chosen by a hash of the subject's pseudonym: a sampled
// subject's calls are all kept, so its budgets replay exactly). Engines
// record into the one their Options name; a gateway keeps one across
// policy reloads.
type Recording struct {
	mu     sync.Mutex
	ring   []Record
	seq    uint64 // calls recorded so far; ring[(seq-1) % len] is the last
	sample uint32
}

// NewRecording returns a recording of at most size calls, of one subject
// in every sample (1 or less: every subject).
func NewRecording(size, sample int) *Recording {
	return &Recording{ring: make([]Record, 0, max(1, size)), sample: uint32(max(1, sample))}
}

// sampled reports whether subject's calls are recorded.
func (r *Recording) sampled(subject string) bool {
	if r.sample == 1 {
		return true
	}
	h := fnv.New32a()
	h.Write([]byte(subject))
	return h.Sum32()%r.sample == 0
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
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seq++
	if len(r.ring) < cap(r.ring) {
		r.ring = append(r.ring, rec)
	} else {
		r.ring[(r.seq-1)%uint64(cap(r.ring))] = rec
	}
	return r.seq
}

// answered sets the status of record seq, the first time, if the ring
// still holds it.
func (r *Recording) answered(seq uint64, status int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if seq == 0 || seq+uint64(cap(r.ring)) <= r.seq {
		return
	}
	if rec := &r.ring[(seq-1)%uint64(cap(r.ring))]; rec.Status == 0 {
		rec.Status = status
	}
}

// Records returns the recorded calls, oldest first.
func (r *Recording) Records() []Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.ring) < cap(r.ring) {
		return append([]Record(nil), r.ring...)
	}
	i := int(r.seq % uint64(cap(r.ring)))
	return append(append([]Record(nil), r.ring[i:]...), r.ring[:i]...)
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
}

// recordAnswer notes a login route's answer in the call's record.
func (v *Verdict) recordAnswer(_ context.Context, status int) {
	if v.e != nil && v.e.opts.Recording != nil && v.recSeq != 0 {
		v.e.opts.Recording.answered(v.recSeq, status)
	}
}
