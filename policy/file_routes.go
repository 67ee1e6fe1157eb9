package policy

import "time"

// The routes' part of the policy file's types (see File.Routes): what a
// route matches, where it sends requests, and its own limits and guards.

// RouteSpec maps requests to an upstream, a route group and a cost.
type RouteSpec struct {
	// Name names the route in errors and logs: 1 to 64 letters, digits,
	// ".", "_" or "-", unique among the routes.
	// Default: required.
	Name string `yaml:"name"`
	// Method is the one HTTP method the route matches, in upper case
	// (e.g. POST); without it the route matches any.
	// Default: none.
	Method string `yaml:"method"`
	// Path is the request path the route matches: exactly (and with a
	// trailing slash), or, when it ends in "/", as a prefix (and without
	// the slash). The most specific route wins: the request's own path,
	// then the longest, then the one with more conditions (host, headers,
	// query), then a method over any (see Policy.MatchRequest). Requests
	// are matched on their decoded, cleaned path, so Path must be
	// absolute, clean and literal but for {param} segments: no . or ..
	// segments, repeated slashes, percent-encodings, backslashes, control
	// or invisible characters, '?', '#' or other pattern syntax (:id, *).
	// Default: required.
	Path string `yaml:"path"`
	// Match spells out how Path matches: exact (the path, and with a
	// trailing slash) or prefix (the path and everything under it). A
	// path may hold parameters, whole segments such as
	// /users/{id}/export, each matching one non-empty segment.
	// Default: prefix when path ends in "/", else exact.
	// One of: exact, prefix.
	Match string `yaml:"match"`
	// Host, if set, is the host the request must name (Host header, port
	// and case ignored): api.example.com, or *.example.com for any host
	// under it.
	// Default: none.
	Host string `yaml:"host"`
	// Headers, if set, maps header names to the value the request must
	// carry, once, for the route to match (ignoring case; "*" for any
	// value; 1 to 256 bytes). A request giving one of them twice is a
	// 400. Credential, forwarding and framing headers are the gateway's,
	// not a route's to match.
	// Default: none.
	Headers map[string]string `yaml:"headers"`
	// Query, if set, maps query parameter names (1 to 64 bytes) to the
	// value the request must carry, once, for the route to match
	// (ignoring case; "*" for any value; 1 to 256 bytes). A request giving
	// one of them twice is a 400.
	// Default: none.
	Query map[string]string `yaml:"query"`
	// LimitKey lists what the route's limit is counted per, each part
	// once: subject, host, header:<Name>, query:<name>, path:<param>,
	// claim:<name> (a bearer JWT's), each value hashed into the store key
	// like a subject. It needs limit; with limit_mode add it includes
	// subject.
	// Default: [subject].
	LimitKey []string `yaml:"limit_key"`
	// Upstream is where the route's requests go: an http(s) URL, or
	// builtin:echo for the demo upstream. Only a policy for the
	// middleware alone may leave it out; the gateway refuses such a
	// route.
	// Default: none; the gateway requires it.
	Upstream string `yaml:"upstream"`
	// Group names the route group in metrics and store keys (1 to 64
	// letters, digits, ".", "_" or "-"); routes of one group share their
	// route limits.
	// Default: the route's name.
	Group string `yaml:"group"`
	// Cost is what one request on the route spends of every budget it is
	// charged to; no more than the least of their capacities.
	// Default: 1.
	// Range: 1 to the least capacity of the budgets it is charged to.
	Cost int64 `yaml:"cost"`
	// Limit, if set, is a budget per subject (or per limit_key) for the
	// route group, which replaces the subject's plan on this route or is
	// charged with it (see limit_mode).
	// Default: none.
	Limit *LimitSpec `yaml:"limit"`
	// LimitMode says how the route's limit meets the plan's: replace (the
	// route's limit instead of the plan's) or add (both, all or nothing
	// in one call). It needs limit.
	// Default: replace.
	// One of: replace, add.
	LimitMode string `yaml:"limit_mode"`
	// Refusal, if set, is what the route answers when a rate limit,
	// quota or concurrency limit refuses a request, instead of the 429
	// problem: another status, or a body of its own. Retry-After and the
	// RateLimit headers are sent alike; other refusals (an invalid key, a
	// locked account) keep their answers.
	// Default: none.
	Refusal *RefusalSpec `yaml:"refusal"`
	// Global, if set, is one budget for the whole route, shared by every
	// subject, charged after the subject's own limits (see Route.Global).
	// Default: none.
	Global *LimitSpec `yaml:"global"`
	// ShadowLimit is a candidate limit per subject evaluated in shadow
	// beside the enforced one: counted, never enforced.
	// Default: none.
	ShadowLimit *LimitSpec `yaml:"shadow_limit"`
	// OnStoreFailure is what the route does while the store is
	// unavailable: fail_open limits locally (see store.instances),
	// fail_closed answers 503.
	// Default: fail_open.
	// One of: fail_open, fail_closed.
	OnStoreFailure string `yaml:"on_store_failure"`
	// Login marks a login route and guards it against password guessing.
	// Default: none.
	Login *LoginSpec `yaml:"login"`
	// Concurrency bounds the requests in flight on this route.
	// Default: none.
	Concurrency *ConcurrencySpec `yaml:"concurrency"`
	// Tokens makes the route an LLM API charged by the token: the plans'
	// token limits are charged an estimate from the request when it
	// arrives, and settled at the usage its response reports.
	// Default: none.
	Tokens *TokensSpec `yaml:"tokens"`
	// Adaptive bounds the requests in flight to the route's upstream by
	// the upstream's own latency (see AdaptiveSpec), refusing the rest
	// at once with 503.
	// Default: none.
	Adaptive *AdaptiveSpec `yaml:"adaptive"`
}

// AdaptiveSpec is an adaptive concurrency limit: Envoy's
// adaptive_concurrency gradient over the upstream's minimum latency (see
// package overload). Every sample_window the limit is multiplied by the
// minimum latency (plus 25 %) over the window's median latency, clamped
// to 0.5-2, plus its square root as headroom; the minimum is measured
// again every min_rtt_interval at min_limit. Past the limit a request is
// refused at once with 503, Retry-After and a problem body, never sent
// on. Routes whose upstreams have one scheme and host share one limit,
// and must set the same adaptive block. The limit protects the upstream;
// plans stay what is sold: the limit is taken first, and a request
// refused by it is charged to no plan.
type AdaptiveSpec struct {
	// MinLimit is the least the limit falls to, and the limit while the
	// minimum latency is measured.
	// Default: 3.
	// Range: 1 to max_limit.
	MinLimit int `yaml:"min_limit"`
	// MaxLimit is the most the limit grows to.
	// Default: 1000.
	// Range: min_limit to 100000.
	MaxLimit int `yaml:"max_limit"`
	// SampleWindow is how often the limit is recomputed from the
	// latencies of the requests that ended since.
	// Default: 100ms.
	// Range: 10ms to 10s.
	SampleWindow time.Duration `yaml:"sample_window"`
	// MinRTTInterval is how often the upstream's minimum latency is
	// measured again (plus up to 10 % jitter), so that an upstream that
	// got slower or faster for good is followed.
	// Default: 1m.
	// Range: 10 sample_windows to 24h.
	MinRTTInterval time.Duration `yaml:"min_rtt_interval"`
	// MinRTTSamples is how many requests measure the minimum latency:
	// their median is it.
	// Default: 50.
	// Range: 1 to 10000.
	MinRTTSamples int `yaml:"min_rtt_samples"`
	// RTTBuffer is the part of the minimum latency a queue may add
	// before the limit falls (Envoy's min_rtt_calc_params.buffer): the
	// limit settles where the median latency is about (1 + rtt_buffer)
	// times the minimum, plus its headroom. Less keeps latency nearer
	// the minimum, at the risk of a limit below what the upstream could
	// serve.
	// Default: 0.25.
	// Range: 0 to 1.
	RTTBuffer *float64 `yaml:"rtt_buffer"`
	// Shares maps plans to the fraction of the limit they are guaranteed
	// when it binds (e.g. pro: 0.6, free: 0.2); a plan may borrow what
	// the others leave unused, so a plan with a smaller share, or none,
	// is refused first. The shares sum to at most 1.
	// Default: none (first come, first served).
	Shares map[string]float64 `yaml:"shares"`
	// Shadow counts the requests the limit would refuse
	// (tollgate_shadow_decisions_total, budget adaptive.<group>) and
	// refuses none: how to roll it out.
	// Default: false.
	Shadow bool `yaml:"shadow"`
}

// TokensSpec makes a route an LLM API, charged by the token. The plans'
// token limits (unit: tokens, input_tokens or output_tokens) are charged,
// when a call arrives, an estimate read from its JSON body (read once,
// within identity.max_body, and passed on as it came), and settled at the
// usage its response reports as it passes to the client: an OpenAI or
// Anthropic usage object, in a JSON body or in a text/event-stream event.
// A body that is not one JSON object, or gives a bound that is not a
// whole number, is refused (400), never charged at a default.
type TokensSpec struct {
	// MaxTokensFields lists the request's JSON fields that bound its
	// output, the first present winning.
	// Default: [max_completion_tokens, max_tokens, max_output_tokens].
	MaxTokensFields []string `yaml:"max_tokens_fields"`
	// DefaultOutput is the output estimate of a request that gives none
	// of max_tokens_fields.
	// Default: 4096.
	// Range: 1 to max_output.
	DefaultOutput int64 `yaml:"default_output"`
	// MaxOutput caps the output estimate: a request asking for more is
	// estimated at max_output, and what it uses beyond is charged as debt
	// when it settles.
	// Default: 32768.
	// Range: at least 1.
	MaxOutput int64 `yaml:"max_output"`
	// BytesPerInputToken estimates the input as the request body's bytes
	// divided by it, rounded up. 1 estimates each call at its ceiling (no
	// token is shorter than a byte), so that no call uses more than its
	// estimate; 0 leaves the input out of the estimate, charged when the
	// call settles.
	// Default: 4.
	// Range: 0 to 64.
	BytesPerInputToken int64 `yaml:"bytes_per_input_token"`
	// MaxUsage is the most tokens one response may report in each count
	// (input, output): a count above it is taken as max_usage, logged and
	// counted. A count that is not a whole number of at least 0 is not
	// believed: the call keeps its estimate, logged and counted too.
	// Default: 2000000.
	// Range: at least 1.
	MaxUsage int64 `yaml:"max_usage"`
	// UsageHeader, if set, names a response header giving the tokens the
	// call used in all, which then settles the call in place of the
	// body's usage.
	// Default: none.
	UsageHeader string `yaml:"usage_header"`
	// UsagePaths, if set, is where the responses report their usage, for
	// an API that reports it in none of the OpenAI and Anthropic shapes
	// (read without it), e.g. Gemini's {input:
	// usageMetadata.promptTokenCount, output:
	// usageMetadata.candidatesTokenCount}.
	// Default: none.
	UsagePaths *UsagePathsSpec `yaml:"usage_paths"`
}

// UsagePathsSpec names where a response reports the tokens it used: each
// a path of JSON object keys joined by ".", from the top of the JSON body
// or of each server-sent event's data, its value a whole number. Every
// report is a running count, the last one counting: a stream cut short
// keeps its estimate. No path may be a prefix of another.
type UsagePathsSpec struct {
	// Input is the path of the input (prompt) tokens.
	// Default: none.
	Input string `yaml:"input"`
	// Output is the path of the output (completion) tokens.
	// Default: none.
	Output string `yaml:"output"`
	// Total is the path of all the tokens, used when input or output is
	// not given (a total alone settles the budgets of unit tokens; those
	// of input_tokens and output_tokens keep their estimate).
	// Default: none.
	Total string `yaml:"total"`
}

// RefusalSpec is a route's answer to a request its limits refuse; it
// sets status, body or both.
type RefusalSpec struct {
	// Status is the HTTP status answered.
	// Default: 429.
	// Range: 400 to 599.
	Status int `yaml:"status"`
	// Body, if set, is the body answered (at most 4096 bytes); without it
	// the answer is the problem+json body with Status.
	// Default: none.
	Body string `yaml:"body"`
	// ContentType is the media type of Body; it needs body.
	// Default: text/plain; charset=utf-8.
	ContentType string `yaml:"content_type"`
}

// LoginSpec guards a login route. The account comes from a field of the
// request body; the outcome from the upstream's status. Only failures
// count: a user who logs in fine is never locked. MaxFailures failures
// within FailureWindow lock the account for Lock; each further lock
// within OffenceMemory doubles, up to MaxLock.
type LoginSpec struct {
	// AccountField names the JSON or form field of the request body
	// holding the account.
	// Default: username.
	AccountField string `yaml:"account_field"`
	// MaxBody is how many bytes of the body are read to find the account
	// field (an integer); the body is passed on to the upstream intact.
	// Default: 65536.
	// Range: 1 to 1048576.
	MaxBody int64 `yaml:"max_body"`
	// FailureStatuses are the upstream statuses that count as a failed
	// login; 2xx counts as a success.
	// Default: [401, 403].
	// Range: 300 to 599.
	FailureStatuses []int `yaml:"failure_statuses"`
	// MaxFailures is how many failed logins within failure_window lock
	// the account.
	// Default: 5.
	// Range: at least 1.
	MaxFailures int64 `yaml:"max_failures"`
	// FailureWindow is how long a failed login counts towards a lock.
	// Default: 15m.
	// Range: 1ms to 365d.
	FailureWindow time.Duration `yaml:"failure_window"`
	// Lock is how long the first lock of an account lasts.
	// Default: 1m.
	// Range: 1ms to max_lock.
	Lock time.Duration `yaml:"lock"`
	// MaxLock is the longest a lock grows to, doubling with each lock
	// within offence_memory.
	// Default: 1h.
	// Range: lock to 365d.
	MaxLock time.Duration `yaml:"max_lock"`
	// OffenceMemory is how long a lock is remembered, so that the next
	// one lasts twice as long.
	// Default: 24h.
	// Range: 1ms to 365d.
	OffenceMemory time.Duration `yaml:"offence_memory"`
	// IPFailures limits failed logins per client IP across accounts, so
	// one IP cannot spray accounts. It is a guard, always enforced: it
	// cannot be in shadow.
	// Default: {algorithm: fixed_window, rate: 20, period: 10m}.
	IPFailures *LimitSpec `yaml:"ip_failures"`
}

// ConcurrencySpec bounds requests in flight.
type ConcurrencySpec struct {
	// Limit is the most requests in flight at once.
	// Default: required.
	// Range: at least 1.
	Limit int64 `yaml:"limit"`
	// Per says who shares Limit: subject (each subject gets Limit) or
	// route (all subjects share it).
	// Default: subject.
	// One of: subject, route.
	Per string `yaml:"per"`
	// LeaseTTL bounds how long a slot stays taken if its release is lost
	// (its gateway died, a store call failed). The default must itself be
	// at most 1h, else lease_ttl is required.
	// Default: upstream.timeout + 30s.
	// Range: 1s to 1h.
	LeaseTTL time.Duration `yaml:"lease_ttl"`
}
