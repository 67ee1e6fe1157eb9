package decidetest

import (
	"fmt"
	"strings"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/envoyrls"
)

// rlsConfig is the RLS cases' configuration, as envoyproxy/ratelimit
// reads it: domain decide, and decide-closed, which fails closed.
var rlsConfig = []envoyrls.Source{
	{Name: "decide.yaml", Data: []byte(`domain: decide
descriptors:
  - {key: client, rate_limit: {unit: minute, requests_per_unit: 3}}
  - key: route
    descriptors:
      - {key: client, rate_limit: {unit: minute, requests_per_unit: 1}}
  - {key: blocked, rate_limit: {unit: minute, requests_per_unit: 0}}
  - {key: free, rate_limit: {unlimited: true}}
  - {key: trial, shadow_mode: true, rate_limit: {unit: minute, requests_per_unit: 1}}
  - {key: vip, rate_limit: {name: vip, unit: minute, requests_per_unit: 10, replaces: [{name: base}]}}
  - {key: base, rate_limit: {name: base, unit: minute, requests_per_unit: 1}}
`)},
	{Name: "closed.yaml", Data: []byte(`domain: decide-closed
on_store_failure: fail_closed
descriptors:
  - {key: client, rate_limit: {unit: minute, requests_per_unit: 3}}
`)},
}

// RLSConfig returns the RLS cases' configuration.
func RLSConfig(tb testing.TB) *envoyrls.Config {
	tb.Helper()
	cfg, err := envoyrls.Parse(rlsConfig, envoyrls.LoadOptions{})
	if err != nil {
		tb.Fatal(err)
	}
	return cfg
}

// An RLSCall is one call to Envoy's rate-limit service and the answer it
// must get.
type RLSCall struct {
	// Domain "" is decide.
	Domain string
	// Descriptors are the call's, each its entries as "key=value" joined
	// by ','.
	Descriptors []string
	// Hits is the request's hits_addend (zero: 1).
	Hits uint32
	Want RLSAnswer
}

// RLSAnswer is what the service answered: the overall code and each
// descriptor's code and limit_remaining, as "ok 2, over 0" ("max" for
// an unlimited descriptor's).
type RLSAnswer struct {
	Over     bool
	Statuses string
}

// An RLSCase is a sequence of RLS calls on fresh budgets, and why each
// answer is the rule.
type RLSCase struct {
	Name, Why string
	// StoreDown says the store is down throughout the case (DownStore).
	StoreDown bool
	Calls     []RLSCall
}

func over(statuses string) RLSAnswer { return RLSAnswer{Over: true, Statuses: statuses} }
func pass(statuses string) RLSAnswer { return RLSAnswer{Statuses: statuses} }

// RLSCases are the engine's decisions of Envoy's descriptors. Each case
// uses descriptor values of its own, so that cases sharing a store never
// share a budget.
var RLSCases = []RLSCase{
	{Name: "descriptor", Why: "each value of a descriptor's key is its own budget, in a fixed window of the unit, refused once used up",
		Calls: []RLSCall{
			{Descriptors: []string{"client=a"}, Want: pass("ok 2")},
			{Descriptors: []string{"client=a"}, Want: pass("ok 1")},
			{Descriptors: []string{"client=a"}, Want: pass("ok 0")},
			{Descriptors: []string{"client=a"}, Want: over("over 0")},
			{Descriptors: []string{"client=b"}, Want: pass("ok 2")},
		}},
	{Name: "nested", Why: "a nested descriptor's limit applies to the whole path of entries, apart from the same key's limit at the top",
		Calls: []RLSCall{
			{Descriptors: []string{"route=r,client=a2"}, Want: pass("ok 0")},
			{Descriptors: []string{"route=r,client=a2"}, Want: over("over 0")},
			{Descriptors: []string{"client=a2"}, Want: pass("ok 2")},
		}},
	{Name: "all or nothing", Why: "a call's descriptors are charged together: a call over any limit charges none of them",
		Calls: []RLSCall{
			{Descriptors: []string{"client=c", "route=r,client=c"}, Want: pass("ok 2, ok 0")},
			{Descriptors: []string{"client=c", "route=r,client=c"}, Want: over("ok 2, over 0")},
			{Descriptors: []string{"client=c"}, Want: pass("ok 1")},
		}},
	{Name: "admits nothing", Why: "a limit of requests_per_unit 0 refuses every call that hits it, and the call's other limits are asked, not charged",
		Calls: []RLSCall{
			{Descriptors: []string{"blocked=x", "client=d"}, Want: over("over 0, ok 3")},
			{Descriptors: []string{"client=d"}, Want: pass("ok 2")},
		}},
	{Name: "unlimited", Why: "an unlimited descriptor is never charged nor refused, and reports the most a status can hold",
		Calls: []RLSCall{
			{Descriptors: []string{"free=x"}, Want: pass("ok max")},
			{Descriptors: []string{"free=x"}, Want: pass("ok max")},
		}},
	{Name: "shadow mode", Why: "a descriptor in shadow_mode is charged but never refuses",
		Calls: []RLSCall{
			{Descriptors: []string{"trial=t"}, Want: pass("ok 0")},
			{Descriptors: []string{"trial=t"}, Want: pass("ok 0")},
			{Descriptors: []string{"trial=t", "client=t"}, Want: pass("ok 0, ok 2")},
		}},
	{Name: "replaces", Why: "a limit that replaces another of the call's limits is applied instead of it: the replaced one is neither charged nor reported",
		Calls: []RLSCall{
			{Descriptors: []string{"vip=v", "base=v"}, Want: pass("ok 9, ok 0")},
			{Descriptors: []string{"vip=v", "base=v"}, Want: pass("ok 8, ok 0")},
			{Descriptors: []string{"base=v"}, Want: pass("ok 0")},
			{Descriptors: []string{"base=v"}, Want: over("over 0")},
		}},
	{Name: "hits", Why: "a call charges its hits_addend; hits that do not fit what is left are refused and charge nothing, and so are hits past the limit's whole capacity",
		Calls: []RLSCall{
			{Descriptors: []string{"client=e"}, Hits: 2, Want: pass("ok 1")},
			{Descriptors: []string{"client=e"}, Hits: 2, Want: over("over 0")},
			{Descriptors: []string{"client=e"}, Want: pass("ok 0")},
			{Descriptors: []string{"client=f"}, Hits: 4, Want: over("over 0")},
			{Descriptors: []string{"client=f"}, Want: pass("ok 2")},
		}},
	{Name: "fail open", StoreDown: true, Why: "while the store is down, a domain that does not fail closed is decided by the local fallback, which enforces the limit",
		Calls: []RLSCall{
			{Descriptors: []string{"client=g"}, Want: pass("ok 2")},
			{Descriptors: []string{"client=g"}, Want: pass("ok 1")},
			{Descriptors: []string{"client=g"}, Want: pass("ok 0")},
			{Descriptors: []string{"client=g"}, Want: over("over 0")},
		}},
	{Name: "fail closed", StoreDown: true, Why: "while the store is down, a domain set to fail closed refuses every call",
		Calls: []RLSCall{
			{Domain: "decide-closed", Descriptors: []string{"client=h"}, Want: over("over 0")},
			{Descriptors: []string{"client=h"}, Want: pass("ok 2")},
		}},
}

// An RLSFront makes the front the RLS cases are run through: the
// rate-limit service under cfg, its engine over store on the table's
// clock; it answers a call.
type RLSFront func(t *testing.T, cfg *envoyrls.Config, store tollgate.Store) func(*rlspb.RateLimitRequest) *rlspb.RateLimitResponse

// RunRLS runs every RLS case on fronts made by newFront, one per case:
// over a store made by newStore, or for a case with StoreDown, over
// DownStore.
func RunRLS(t *testing.T, cases []RLSCase, newStore func(t *testing.T) tollgate.Store, newFront RLSFront) {
	cfg := RLSConfig(t)
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			s := newStore
			if c.StoreDown {
				s = DownStore
			}
			call := newFront(t, cfg, s(t))
			for i, cl := range c.Calls {
				if got := RLSAnswerOf(call(RLSRequest(cl))); got != cl.Want {
					t.Errorf("call %d (%s): got %+v, want %+v\n(%s)", i, strings.Join(cl.Descriptors, " "), got, cl.Want, c.Why)
				}
			}
		})
	}
}

// RLSRequest is the request c is.
func RLSRequest(c RLSCall) *rlspb.RateLimitRequest {
	req := &rlspb.RateLimitRequest{Domain: c.Domain, HitsAddend: c.Hits}
	if req.Domain == "" {
		req.Domain = "decide"
	}
	for _, d := range c.Descriptors {
		var desc rlv3.RateLimitDescriptor
		for _, e := range strings.Split(d, ",") {
			k, v, _ := strings.Cut(e, "=")
			desc.Entries = append(desc.Entries, &rlv3.RateLimitDescriptor_Entry{Key: k, Value: v})
		}
		req.Descriptors = append(req.Descriptors, &desc)
	}
	return req
}

// RLSAnswerOf is the answer resp is.
func RLSAnswerOf(resp *rlspb.RateLimitResponse) RLSAnswer {
	var sb strings.Builder
	for i, st := range resp.GetStatuses() {
		if i > 0 {
			sb.WriteString(", ")
		}
		code := "ok"
		if st.Code == rlspb.RateLimitResponse_OVER_LIMIT {
			code = "over"
		}
		if st.LimitRemaining == 1<<32-1 {
			fmt.Fprintf(&sb, "%s max", code)
		} else {
			fmt.Fprintf(&sb, "%s %d", code, st.LimitRemaining)
		}
	}
	return RLSAnswer{Over: resp.GetOverallCode() == rlspb.RateLimitResponse_OVER_LIMIT, Statuses: sb.String()}
}
