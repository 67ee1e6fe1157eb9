// Package policy reads, validates and compiles Tollgate's policy file: the
// listeners, the store, how subjects are identified, the plans and their
// limits, the API keys and the routes.
//
// Loading is all or nothing: a file with any problem yields a
// [*ValidationError] listing every problem with its file and line, and no
// Policy. See examples/quickstart.yaml for a complete file.
package policy

import "time"

// File is the policy file as written.
type File struct {
	// Version names this revision of the policy (letters, digits, ".", "_",
	// "-"), as the admin listener and the logs report it. It is no part of
	// a store key: a budget's state follows its limit (see
	// Budget.StoreName), so a new version keeps the state of every limit it
	// leaves unchanged.
	Version   string       `yaml:"version"`
	Listeners ListenerSpec `yaml:"listeners"`
	Store     StoreSpec    `yaml:"store"`
	Identity  IdentitySpec `yaml:"identity"`
	// Plans maps a plan name to its limits.
	Plans map[string]PlanSpec `yaml:"plans"`
	// APIKeys lists the API keys by digest; KeysFile names a further YAML
	// file (relative to this one) with an api_keys list of its own.
	APIKeys  []KeySpec `yaml:"api_keys"`
	KeysFile string    `yaml:"keys_file"`
	// InvalidKeyLimit limits, per client IP, requests that present an
	// unknown or malformed API key. Default: fixed_window 10 per minute.
	InvalidKeyLimit *LimitSpec   `yaml:"invalid_key_limit"`
	Routes          []RouteSpec  `yaml:"routes"`
	Headers         HeaderSpec   `yaml:"headers"`
	Logging         LogSpec      `yaml:"logging"`
	Upstream        UpstreamSpec `yaml:"upstream"`
	// Tracing sends OpenTelemetry traces of the public requests to an
	// OTLP/HTTP collector (off by default).
	Tracing TracingSpec `yaml:"tracing"`
	// Region, if set, makes this gateway enforce one region's share of
	// every budget against its own store: the plans', tenants', route
	// limits, globals, candidates, the invalid-key limit and the logins'
	// failures per address (see Policy.Budgets).
	Region *RegionSpec `yaml:"region"`
	// TimeZone is the IANA zone of calendar quotas that name none
	// (default UTC).
	TimeZone string `yaml:"time_zone"`
	// Shadow puts every rate limit and quota of the file in shadow (the
	// plans', tenants', route limits and globals; candidates always are):
	// they are counted, and refuse nothing. The guards stay enforced: the
	// invalid-key limit, the login guard (account locks and failures per
	// address) and concurrency limits, so a file tried in shadow opens no
	// window for guessing keys or passwords (see BudgetRole.Guard).
	Shadow bool `yaml:"shadow"`
	// Tenants overrides, per tenant, the plan of every API key of that
	// tenant (e.g. acme: {plan: pro}).
	Tenants map[string]TenantSpec `yaml:"tenants"`
	// Allowlist lists subjects never refused by a rate limit or quota.
	Allowlist *AllowlistSpec `yaml:"allowlist"`
}

// TenantSpec overrides a tenant's plan.
type TenantSpec struct {
	Plan string `yaml:"plan"`
}

// PlanSpec is a plan: one limit written inline (rate, period, ...), or
// several under limits, all charged together, all or nothing; and
// optionally a tenant budget that the users of one tenant share.
type PlanSpec struct {
	LimitSpec `yaml:",inline"`
	Limits    []NamedLimitSpec `yaml:"limits"`
	// Tenant is a budget per tenant (API keys name their tenant), charged
	// in the same atomic call as the user's limits.
	Tenant *LimitSpec `yaml:"tenant"`
	// Unlimited makes a plan without limits: its subjects are counted
	// (tollgate_decisions_total, budget "unlimited") and never refused by
	// a rate limit or quota, the routes' own and global budgets included.
	// The guards still apply: invalid keys, login guards, concurrency.
	Unlimited bool `yaml:"unlimited"`
}

// AllowlistSpec lists subjects that are counted, never refused by a rate
// limit or quota, whatever their plan (as if it were unlimited).
type AllowlistSpec struct {
	// Keys lists API key ids.
	Keys []string `yaml:"keys"`
	// Users lists user ids: a key's user, the user header's (from a
	// trusted proxy), a bearer JWT's subject.
	Users []string `yaml:"users"`
	// Tenants lists tenants: a key's, a bearer JWT's.
	Tenants []string `yaml:"tenants"`
	// Addresses lists client addresses and CIDRs: every request from
	// them whose credentials (if any) are valid.
	Addresses []string `yaml:"addresses"`
}

// NamedLimitSpec is one of a plan's limits; Name appears in the
// RateLimit-Policy header (default: the plan's name and the limit's index).
type NamedLimitSpec struct {
	Name      string `yaml:"name"`
	LimitSpec `yaml:",inline"`
}

// RegionSpec splits every budget across regions that each count against
// their own store: this region enforces (1 - Margin) / Count of each
// (RegionShare), guards and candidates included (see Policy.Budgets).
// Together the regions never admit more than the global limit; a client
// that uses one region only gets that region's share.
type RegionSpec struct {
	Name   string  `yaml:"name"`
	Count  int     `yaml:"count"`
	Margin float64 `yaml:"margin"`
}

// ListenerSpec gives the two listen addresses; they must differ.
type ListenerSpec struct {
	Public string `yaml:"public"`
	// Admin serves /healthz, /readyz and /metrics; default
	// 127.0.0.1:9090. Off loopback it needs a token.
	Admin string `yaml:"admin"`
	// AdminTokenEnv names the environment variable holding the bearer
	// token every admin request must present (Authorization: Bearer).
	// Required when Admin is not a loopback address.
	AdminTokenEnv string `yaml:"admin_token_env"`

	// HeaderTimeout bounds reading a request's headers (default 10s).
	HeaderTimeout time.Duration `yaml:"header_timeout"`
	// BodyTimeout bounds reading a request's body, from the end of its
	// headers (default 10s): a client still sending then gets 408 and its
	// connection is closed. Routes that take large uploads need more.
	BodyTimeout time.Duration `yaml:"body_timeout"`
	// IdleTimeout closes a keep-alive connection left idle this long
	// (default 2m).
	IdleTimeout time.Duration `yaml:"idle_timeout"`
	// SendTimeout closes a connection when one write of a response waits
	// this long for the client to take it in (default 1m).
	SendTimeout time.Duration `yaml:"send_timeout"`
	// MaxConnsPerClient caps the public connections open from one client
	// address, an IPv6 client's /64 counting as one (default 256). The
	// immediate peers in identity.trusted_proxies count only against
	// MaxConns.
	MaxConnsPerClient int `yaml:"max_conns_per_client"`
	// MaxConns caps all public connections (default: half the file
	// descriptors the process may open, less a reserve). Over a cap a
	// connection is closed as soon as it is accepted.
	MaxConns int `yaml:"max_conns"`
	// AdminMaxConns caps the admin listener's connections, a budget apart
	// from the public one (default 64).
	AdminMaxConns int `yaml:"admin_max_conns"`
}

// StoreSpec chooses where state lives.
type StoreSpec struct {
	// Type is "memory" (the default) or "redis".
	Type string `yaml:"type"`
	// URL is the Redis URL, required for "redis": redis://host:port/db;
	// more addresses as ?addr=host:port; a Sentinel master as
	// ?master_set=name (the addresses are then the sentinels').
	URL string `yaml:"url"`
	// Mode is "standalone", "cluster" or "sentinel"; empty means cluster
	// when Redis says so, sentinel when the URL names a master_set, and
	// standalone otherwise.
	Mode string `yaml:"mode"`
	// MaxBytes bounds the in-memory store's state, e.g. 256MiB (0: the
	// default, 256MiB). When full, it evicts what costs least to forget;
	// see the README's Stores section.
	MaxBytes ByteSize `yaml:"max_bytes"`
	// MaxKeys, if set, also caps the in-memory store's keys.
	MaxKeys int `yaml:"max_keys"`
	// Timeout bounds each call to Redis (default 20ms).
	Timeout time.Duration `yaml:"timeout"`
	// Instances is how many gateways share the Redis; while it is
	// unavailable, a fail_open route is limited locally to 1/Instances of
	// its limit (default 1).
	Instances int `yaml:"instances"`
	// CalendarFallback is what a fail_open route does with calendar quotas
	// (calendar: day or month) while Redis is unavailable: "closed" (the
	// default) answers 503, as a fail_closed route; "share" gives this
	// instance's share of what Redis last said remained (503 for a
	// subject this instance has not seen Redis decide since it started).
	CalendarFallback string `yaml:"calendar_fallback"`
	// Breaker tunes the circuit breaker in front of Redis.
	Breaker BreakerSpec `yaml:"breaker"`
}

// BreakerSpec tunes the circuit breaker.
type BreakerSpec struct {
	// Failures is how many consecutive failed calls open it (default 5).
	Failures uint32 `yaml:"failures"`
	// OpenFor is how long it stays open before probing Redis (default 1s).
	OpenFor time.Duration `yaml:"open_for"`
}

// IdentitySpec says how a request's subject is found.
type IdentitySpec struct {
	// Secret (or the environment variable named by SecretEnv) keys the HMAC
	// that turns API key ids, user ids and IPs into pseudonyms. Required
	// with a Redis store, so that every instance hashes alike.
	Secret    string `yaml:"secret"`
	SecretEnv string `yaml:"secret_env"`
	// UserHeader names the header a trusted auth proxy sets to the user id.
	// It is believed only from a trusted proxy.
	UserHeader string `yaml:"user_header"`
	// TrustedProxies lists the CIDRs whose forwarding headers are believed.
	// A list that covers all of IPv4 or IPv6 (however written), or more
	// public space than a /8 (IPv4) or /24 (IPv6), loads with a warning.
	TrustedProxies []string `yaml:"trusted_proxies"`
	// AnonymousPlan limits requests identified only by client IP; UserPlan
	// those identified by user id (default: AnonymousPlan).
	AnonymousPlan string `yaml:"anonymous_plan"`
	UserPlan      string `yaml:"user_plan"`
	// MaxBody is the largest form, JSON or multipart body read for a
	// credential (an access_token field, which frameworks read as one):
	// default 1MiB, at most 64MiB. A larger one is a 413.
	MaxBody ByteSize `yaml:"max_body"`
	// CredentialFields names the query, body and cookie fields the
	// services behind read a credential from (default access_token,
	// bearer_token, api_token); each is read however frameworks spell it.
	CredentialFields []string `yaml:"credential_fields"`
	// JWT, if set, verifies bearer tokens that are JWTs (three
	// base64url parts, the first a JSON object) and charges each to the
	// subject its claims name; other bearer tokens stay API keys.
	JWT *JWTSpec `yaml:"jwt"`
}

// JWTSpec says how bearer JWTs are verified and whom they name. A token
// that does not verify (bad signature, unknown key, an algorithm not
// allowed, expired, not yet valid, another issuer or audience, no
// subject) is a 401 charged to the client address's invalid_key_limit,
// exactly like an unknown API key.
type JWTSpec struct {
	// JWKSURL is where the signing keys are published (https; http only
	// to a loopback host). Required for the asymmetric algorithms.
	JWKSURL string `yaml:"jwks_url"`
	// Issuer, if set, must be the token's iss.
	Issuer string `yaml:"issuer"`
	// Audience, if set, lists the audiences accepted: the token's aud
	// must name one of them.
	Audience []string `yaml:"audience"`
	// Algorithms lists the signature algorithms accepted (default RS256,
	// ES256, EdDSA). "none" is never accepted; HS256/HS384/HS512 only
	// when listed here and HMACSecretEnv names the shared secret.
	Algorithms []string `yaml:"algorithms"`
	// HMACSecretEnv names the environment variable holding the HMAC
	// secret (at least 32 bytes) of the HS* algorithms.
	HMACSecretEnv string `yaml:"hmac_secret_env"`
	// ClockSkew is how far exp, nbf and iat may be off (default 30s, at
	// most 5m).
	ClockSkew time.Duration `yaml:"clock_skew"`
	// SubjectClaim names the claim the subject is read from (default
	// "sub"); TenantClaim and PlanClaim, if set, the claims naming the
	// tenant and the plan.
	SubjectClaim string `yaml:"subject_claim"`
	TenantClaim  string `yaml:"tenant_claim"`
	PlanClaim    string `yaml:"plan_claim"`
	// DefaultPlan is the plan of a token whose plan claim is absent or
	// names no plan (default: identity.user_plan).
	DefaultPlan string `yaml:"default_plan"`
	// RefreshInterval is the longest the keys are kept before they are
	// fetched again (default 15m, at most 24h); MinRefreshInterval the
	// least time between two fetches (default 30s), whether the JWKS's
	// Cache-Control asks for sooner or tokens name a key id not in it.
	RefreshInterval    time.Duration `yaml:"refresh_interval"`
	MinRefreshInterval time.Duration `yaml:"min_refresh_interval"`
}

// LimitSpec is one limit as written.
type LimitSpec struct {
	Algorithm string        `yaml:"algorithm"` // default gcra
	Rate      int64         `yaml:"rate"`
	Period    time.Duration `yaml:"period"` // e.g. 1m
	Burst     int64         `yaml:"burst"`
	// MaxDelay makes a leaky_bucket limit shape traffic: a request that
	// does not fit is held up to this long to fit the rate, and refused
	// only beyond it. At most 30s, and at most 1,000 requests may wait at
	// once (max_delay × rate / period), since each holds a connection.
	MaxDelay time.Duration `yaml:"max_delay"`
	// Calendar ("day" or "month") makes a quota that resets at local
	// midnight (or on the 1st) in TimeZone (default: the file's
	// time_zone, else UTC). It takes no period; the algorithm is
	// fixed_window.
	Calendar string `yaml:"calendar"`
	TimeZone string `yaml:"time_zone"`
	// Shadow evaluates and counts this limit exactly as if enforced, but
	// it never refuses a request or changes a response: for trying a limit
	// on live traffic before enforcing it. The guards (invalid_key_limit,
	// a login's ip_failures) are always enforced and refuse it.
	Shadow bool `yaml:"shadow"`
}

// KeySpec is one API key. The key itself is never stored: Digest is
// "sha256:" and the hex SHA-256 of it (`echo KEY | tollgate hash-key` prints it).
type KeySpec struct {
	ID     string `yaml:"id" json:"id,omitempty"`
	Digest string `yaml:"digest" json:"digest"`
	Tenant string `yaml:"tenant" json:"tenant,omitempty"`
	User   string `yaml:"user" json:"user,omitempty"`
	Plan   string `yaml:"plan" json:"plan"`
}

// RouteSpec maps requests to an upstream, a route group and a cost.
type RouteSpec struct {
	Name string `yaml:"name"`
	// Method matches one HTTP method; empty matches any.
	Method string `yaml:"method"`
	// Path matches exactly (and with a trailing slash), or, when it ends in
	// "/", as a prefix (and without the slash). The most specific route
	// wins: the request's own path, then the longest, then the one with
	// more conditions (host, headers, query), then a method over any (see
	// Policy.MatchRequest). Requests are matched on their decoded,
	// cleaned path, so Path must be clean and literal but for {param}
	// segments: no . or .. segments, repeated slashes, percent-encodings,
	// backslashes, control or invisible characters, '?', '#' or other
	// pattern syntax (:id, *).
	Path string `yaml:"path"`
	// Match spells out how Path matches: "exact" (the path, and with a
	// trailing slash) or "prefix" (the path and everything under it);
	// default: prefix when Path ends in "/". A path may hold parameters,
	// whole segments such as /users/{id}/export, each matching one
	// non-empty segment.
	Match string `yaml:"match"`
	// Host, if set, is the host the request must name (Host header, port
	// and case ignored): api.example.com, or *.example.com for any host
	// under it.
	Host string `yaml:"host"`
	// Headers and Query, if set, are headers and query parameters the
	// request must carry, once, with the value given (ignoring case), or
	// with any value for "*". A request giving one of them twice is a 400.
	Headers map[string]string `yaml:"headers"`
	Query   map[string]string `yaml:"query"`
	// LimitKey lists what the route's limit is counted per (default:
	// the subject): subject, host, header:<Name>, query:<name>,
	// path:<param>, claim:<name> (a bearer JWT's), each value hashed
	// into the store key like a subject.
	LimitKey []string `yaml:"limit_key"`
	// Upstream is an http(s) URL, or "builtin:echo" for the demo upstream.
	Upstream string `yaml:"upstream"`
	// Group names the route in metrics (default: Name).
	Group string `yaml:"group"`
	// Cost is what one request spends (default 1).
	Cost int64 `yaml:"cost"`
	// Limit, if set, is a budget per subject for the route group, which
	// replaces the subject's plan on this route (LimitMode "replace", the
	// default) or is charged with it, all or nothing in one call
	// (LimitMode "add").
	Limit     *LimitSpec `yaml:"limit"`
	LimitMode string     `yaml:"limit_mode"`
	// Refusal, if set, is what the route answers when a rate limit,
	// quota or concurrency limit refuses a request, instead of the 429
	// problem: another status, or a body of its own. Retry-After and the
	// RateLimit headers are sent alike; other refusals (an invalid key, a
	// locked account) keep their answers.
	Refusal *RefusalSpec `yaml:"refusal"`
	// Global, if set, is one budget for the whole route, shared by every
	// subject, charged after the subject's own limits (see Route.Global).
	Global *LimitSpec `yaml:"global"`
	// ShadowLimit is a candidate limit per subject evaluated in shadow
	// beside the enforced one: counted, never enforced.
	ShadowLimit *LimitSpec `yaml:"shadow_limit"`
	// OnStoreFailure is "fail_open" (default) or "fail_closed".
	OnStoreFailure string `yaml:"on_store_failure"`
	// Login marks a login route and guards it against password guessing.
	Login *LoginSpec `yaml:"login"`
	// Concurrency bounds the requests in flight on this route.
	Concurrency *ConcurrencySpec `yaml:"concurrency"`
}

// RefusalSpec is a route's answer to a request its limits refuse.
type RefusalSpec struct {
	// Status is the status answered (default 429), 400 to 599.
	Status int `yaml:"status"`
	// Body, if set, is the body answered (at most 4 KiB), of
	// ContentType (default text/plain; charset=utf-8); without it the
	// answer is the problem+json body with Status.
	Body        string `yaml:"body"`
	ContentType string `yaml:"content_type"`
}

// LoginSpec guards a login route. The account comes from a field of the
// request body; the outcome from the upstream's status. Only failures
// count: a user who logs in fine is never locked.
type LoginSpec struct {
	// AccountField names the JSON or form field holding the account
	// (default "username"). The body is read up to MaxBody (default
	// 64 KiB) to find it and passed on to the upstream intact.
	AccountField string `yaml:"account_field"`
	MaxBody      int64  `yaml:"max_body"`
	// FailureStatuses are the upstream statuses that count as a failed
	// login (default 401 and 403); 2xx counts as a success.
	FailureStatuses []int `yaml:"failure_statuses"`
	// MaxFailures failures (default 5) within FailureWindow (default 15m)
	// lock the account for Lock (default 1m); each further lock within
	// OffenceMemory (default 24h) doubles, up to MaxLock (default 1h).
	MaxFailures   int64         `yaml:"max_failures"`
	FailureWindow time.Duration `yaml:"failure_window"`
	Lock          time.Duration `yaml:"lock"`
	MaxLock       time.Duration `yaml:"max_lock"`
	OffenceMemory time.Duration `yaml:"offence_memory"`
	// IPFailures limits failed logins per client IP across accounts
	// (default fixed_window 20 per 10m), so one IP cannot spray accounts.
	IPFailures *LimitSpec `yaml:"ip_failures"`
}

// ConcurrencySpec bounds requests in flight.
type ConcurrencySpec struct {
	// Limit is the most requests in flight at once.
	Limit int64 `yaml:"limit"`
	// Per is "subject" (default: each subject gets Limit) or "route" (all
	// subjects share Limit).
	Per string `yaml:"per"`
	// LeaseTTL bounds how long a slot is held if its gateway dies
	// (default: the upstream timeout plus 30s; at most 1h).
	LeaseTTL time.Duration `yaml:"lease_ttl"`
}

// HeaderSpec chooses optional response headers.
type HeaderSpec struct {
	// Legacy adds X-RateLimit-Limit, -Remaining and -Reset.
	Legacy bool `yaml:"legacy"`
}

// LogSpec configures the gateway's logs: JSON (or text) lines on
// standard error.
type LogSpec struct {
	// Level is the least severe level logged: debug, info (default), warn
	// or error.
	Level string `yaml:"level"`
	// Format is json (default) or text.
	Format string `yaml:"format"`
	// AccessSample is the share of requests the access log writes a line
	// for, from 0 (none) to 1 (every one, the default).
	AccessSample *float64 `yaml:"access_sample"`
	// AccessPerSecond bounds the access log's lines per second (default
	// 1,000), so that a flood of requests cannot flood the log: lines
	// past it are dropped and counted (tollgate_access_log_dropped_total).
	AccessPerSecond int `yaml:"access_per_second"`
}

// TracingSpec configures OpenTelemetry tracing: a server span per public
// request, a child span per store call and one around the call to the
// upstream, whose W3C trace context the upstream receives.
type TracingSpec struct {
	// Endpoint is the OTLP/HTTP collector's base URL, e.g.
	// http://collector:4318 (spans are posted to its /v1/traces). Empty
	// means the environment variable OTEL_EXPORTER_OTLP_ENDPOINT, and
	// when that is unset too, no tracing (the default).
	Endpoint string `yaml:"endpoint"`
	// Sample is the share of new traces recorded, from 0 to 1 (default
	// 1). A request that continues a trace (see identity.trusted_proxies)
	// follows its parent's decision instead.
	Sample *float64 `yaml:"sample"`
	// ServiceName names the gateway in the traces (default: the
	// environment variable OTEL_SERVICE_NAME, else "tollgate").
	ServiceName string `yaml:"service_name"`
}

// UpstreamSpec configures calls to upstreams.
type UpstreamSpec struct {
	// Timeout bounds the wait for an upstream's response headers
	// (default 30s).
	Timeout time.Duration `yaml:"timeout"`
}
