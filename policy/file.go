// Package policy reads, validates and compiles Tollgate's policy file: the
// listeners, the store, how subjects are identified, the plans and their
// limits, the API keys and the routes.
//
// Loading is all or nothing: a file with any problem yields a
// [*ValidationError] listing every problem with its file and line, and no
// Policy. See examples/quickstart.yaml for a complete file.
//
// Every field of the file's types says, in its doc comment, what its key
// means, then on lines of their own its default (Default:), its allowed
// values (One of:) and its bounds (Range:), from which the configuration
// reference and the JSON Schema are generated. The routes' types are in
// file_routes.go.
package policy

import "time"

// File is the policy file as written.
type File struct {
	// Version names this revision of the policy, as the admin listener
	// and the logs report it: 1 to 32 letters, digits, ".", "_" or "-".
	// It is no part of a store key: a budget's state follows its limit
	// (see Budget.StoreName), so a new version keeps the state of every
	// limit it leaves unchanged.
	// Default: required.
	Version string `yaml:"version"`
	// Listeners gives the public and admin listen addresses and bounds
	// their connections.
	Listeners ListenerSpec `yaml:"listeners"`
	// Store chooses where the limits' state lives: in memory or in Redis.
	Store StoreSpec `yaml:"store"`
	// Identity says how a request's subject (API key, user, client IP) is
	// found and which plans apply to those without a key.
	Identity IdentitySpec `yaml:"identity"`
	// Plans maps a plan name (1 to 64 letters, digits, ".", "_" or "-")
	// to its limits; at least one plan is defined.
	// Default: required.
	Plans map[string]PlanSpec `yaml:"plans"`
	// APIKeys lists the API keys by digest, each with its plan.
	// Default: none.
	APIKeys []KeySpec `yaml:"api_keys"`
	// KeysFile names a further YAML file, relative to this one unless
	// absolute, with an api_keys list of its own. The keys are listed
	// either here or in api_keys, not in both.
	// Default: none.
	KeysFile string `yaml:"keys_file"`
	// InvalidKeyLimit limits, per client IP, requests that present an
	// unknown or malformed API key. It is a guard, always enforced: it
	// cannot be in shadow.
	// Default: {algorithm: fixed_window, rate: 10, period: 1m}.
	InvalidKeyLimit *LimitSpec `yaml:"invalid_key_limit"`
	// Routes maps requests to an upstream, a route group and a cost; at
	// least one route is defined (a policy built in Go for the middleware
	// alone may have none).
	// Default: required.
	Routes []RouteSpec `yaml:"routes"`
	// Headers chooses optional response headers.
	Headers HeaderSpec `yaml:"headers"`
	// Logging configures the gateway's logs and its access log.
	Logging LogSpec `yaml:"logging"`
	// Upstream configures the calls to the routes' upstreams.
	Upstream UpstreamSpec `yaml:"upstream"`
	// Tracing sends OpenTelemetry traces of the public requests to an
	// OTLP/HTTP collector.
	// Default: none (off, unless OTEL_EXPORTER_OTLP_ENDPOINT is set).
	Tracing TracingSpec `yaml:"tracing"`
	// Region, if set, makes this gateway enforce one region's share of
	// every budget against its own store: the plans', tenants', route
	// limits, globals, candidates, the invalid-key limit and the logins'
	// failures per address (see Policy.Budgets).
	// Default: none.
	Region *RegionSpec `yaml:"region"`
	// TimeZone is the IANA time zone (e.g. Europe/Paris) of the calendar
	// quotas that name none.
	// Default: UTC.
	TimeZone string `yaml:"time_zone"`
	// Shadow puts every rate limit and quota of the file in shadow (the
	// plans', tenants', route limits and globals; candidates always are):
	// they are counted, and refuse nothing. The guards stay enforced: the
	// invalid-key limit, the login guard (account locks and failures per
	// address) and concurrency limits, so a file tried in shadow opens no
	// window for guessing keys or passwords (see BudgetRole.Guard).
	// Default: false.
	Shadow bool `yaml:"shadow"`
	// Tenants overrides, per tenant, the plan of every API key of that
	// tenant (e.g. acme: {plan: pro}).
	// Default: none.
	Tenants map[string]TenantSpec `yaml:"tenants"`
	// Allowlist lists subjects never refused by a rate limit or quota.
	// Default: none.
	Allowlist *AllowlistSpec `yaml:"allowlist"`
}

// TenantSpec overrides a tenant's plan.
type TenantSpec struct {
	// Plan names the plan every API key of the tenant gets, instead of
	// its own.
	// Default: required.
	Plan string `yaml:"plan"`
}

// PlanSpec is a plan: one limit written inline (rate, period, ...), or
// several under limits, all charged together, all or nothing; and
// optionally a tenant budget that the users of one tenant share.
type PlanSpec struct {
	// LimitSpec is the plan's one limit, written inline in the plan
	// (rate, period, algorithm, ...); a plan has it, or limits, or
	// unlimited: true, and only one of them.
	LimitSpec `yaml:",inline"`
	// UnitSpec is what the plan's one limit counts, written inline.
	UnitSpec `yaml:",inline"`
	// Limits lists the plan's limits, at most 8, each charged on every
	// request, all or nothing; each appears in the RateLimit-Policy
	// header under its name.
	// Default: none.
	Limits []NamedLimitSpec `yaml:"limits"`
	// Tenant is the budget per tenant (API keys and JWTs name their
	// tenant) that the users of one tenant share, charged in the same
	// atomic call as the user's limits: one limit written inline, or
	// several under limits, in requests or tokens like the plan's.
	// Default: none.
	Tenant *TenantLimitSpec `yaml:"tenant"`
	// Unlimited makes a plan without limits: its subjects are counted
	// (tollgate_decisions_total, budget "unlimited") and never refused by
	// a rate limit or quota, the routes' own and global budgets included.
	// It takes no rate, limits or tenant. The guards still apply: invalid
	// keys, login guards, concurrency.
	// Default: false.
	Unlimited bool `yaml:"unlimited"`
}

// TenantLimitSpec is a plan's budget per tenant: one limit written inline, or
// several under limits (at most 8), all charged with the user's.
type TenantLimitSpec struct {
	// LimitSpec is the tenant's one limit, written inline (rate, period,
	// algorithm, ...); a tenant budget has it or limits, not both.
	LimitSpec `yaml:",inline"`
	// UnitSpec is what the tenant's one limit counts, written inline.
	UnitSpec `yaml:",inline"`
	// Limits lists the tenant's limits, each named as a plan's are.
	// Default: none.
	Limits []NamedLimitSpec `yaml:"limits"`
}

// AllowlistSpec lists subjects that are counted, never refused by a rate
// limit or quota, whatever their plan (as if it were unlimited).
type AllowlistSpec struct {
	// Keys lists the ids of API keys never refused; each must be the id
	// of a key listed in api_keys or keys_file.
	// Default: none.
	Keys []string `yaml:"keys"`
	// Users lists the user ids never refused (1 to 128 bytes each): a
	// key's user, the user header's (from a trusted proxy), a bearer
	// JWT's subject.
	// Default: none.
	Users []string `yaml:"users"`
	// Tenants lists the tenants never refused (1 to 128 bytes each): a
	// key's, a bearer JWT's.
	// Default: none.
	Tenants []string `yaml:"tenants"`
	// Addresses lists the client addresses and CIDRs never refused: every
	// request from them whose credentials (if any) are valid.
	// Default: none.
	Addresses []string `yaml:"addresses"`
}

// NamedLimitSpec is one of a plan's limits, with its name.
type NamedLimitSpec struct {
	// Name names the limit in the RateLimit-Policy header (as the plan's
	// name, ".", and it): 1 to 64 letters, digits, ".", "_" or "-",
	// unique in the plan.
	// Default: the limit's index in the list (0, 1, ...).
	Name string `yaml:"name"`
	// LimitSpec is the limit itself, written inline beside name (rate,
	// period, algorithm, ...).
	LimitSpec `yaml:",inline"`
	// UnitSpec is what the limit counts, written inline beside name.
	UnitSpec `yaml:",inline"`
}

// UnitSpec is what a plan's or a tenant's limit counts, and the calls
// it applies to.
type UnitSpec struct {
	// Unit is what the limit counts: requests (each at its route's cost)
	// or, on routes with tokens (an LLM API), the tokens a call uses:
	// tokens (input and output), input_tokens or output_tokens. A token
	// limit is charged an estimate when the call arrives and settled at
	// the usage its response reports, so its algorithm must be one that
	// settles (gcra, token_bucket, fixed_window, sliding_counter, or a
	// calendar quota); routes without tokens do not charge it.
	// Default: requests.
	// One of: requests, tokens, input_tokens, output_tokens.
	Unit string `yaml:"unit"`
	// Models, if set, lists the models (a token route's request's JSON
	// "model", compared exactly) the limit applies to; a call for
	// another model, or on a route without tokens, is not charged it.
	// Default: none (every call).
	Models []string `yaml:"models"`
	// PerModel counts the limit apart for each of models, as providers
	// publish their limits per model. It needs models.
	// Default: false.
	PerModel bool `yaml:"per_model"`
}

// RegionSpec splits every budget across regions that each count against
// their own store: this region enforces (1 - Margin) / Count of each
// (RegionShare), guards and candidates included (see Policy.Budgets).
// Together the regions never admit more than the global limit; a client
// that uses one region only gets that region's share.
type RegionSpec struct {
	// Name names this gateway's region (1 to 64 letters, digits, ".", "_"
	// or "-"), as the policy and its errors report it.
	// Default: required.
	Name string `yaml:"name"`
	// Count is how many regions share every budget; each enforces its
	// 1/Count share (less the margin), at least 1 of each rate and burst.
	// Default: required.
	// Range: at least 1.
	Count int `yaml:"count"`
	// Margin is the fraction of every budget held back from the regions'
	// shares, for safety (e.g. 0.1); it is less than 1.
	// Default: 0.
	// Range: 0 to 1 (1 excluded).
	Margin float64 `yaml:"margin"`
}

// ListenerSpec gives the two listen addresses, which must differ, and
// bounds the connections.
type ListenerSpec struct {
	// Public is the host:port the gateway serves the public requests on.
	// tollgate serve --listen replaces it; without either, the policy is
	// for the middleware alone, and the gateway refuses it.
	// Default: none.
	Public string `yaml:"public"`
	// Admin is the host:port of the admin listener, which serves
	// /healthz, /readyz and /metrics; tollgate serve --admin replaces it.
	// Off loopback it needs a token (admin_token_env).
	// Default: 127.0.0.1:9090.
	Admin string `yaml:"admin"`
	// AdminTokenEnv names the environment variable holding the bearer
	// token (at least 16 bytes) every admin request must present
	// (Authorization: Bearer). Required when Admin is not a loopback
	// address.
	// Default: none.
	AdminTokenEnv string `yaml:"admin_token_env"`
	// HeaderTimeout bounds reading a request's headers.
	// Default: 10s.
	// Range: 100ms to 1m.
	HeaderTimeout time.Duration `yaml:"header_timeout"`
	// BodyTimeout bounds reading a request's body, from the end of its
	// headers: a client still sending then gets 408 and its connection is
	// closed. Routes that take large uploads need more.
	// Default: 10s.
	// Range: 100ms to 1h.
	BodyTimeout time.Duration `yaml:"body_timeout"`
	// IdleTimeout closes a keep-alive connection left idle this long.
	// Default: 2m.
	// Range: 100ms to 1h.
	IdleTimeout time.Duration `yaml:"idle_timeout"`
	// SendTimeout closes a connection when one write of a response waits
	// this long for the client to take it in.
	// Default: 1m.
	// Range: 100ms to 10m.
	SendTimeout time.Duration `yaml:"send_timeout"`
	// MaxConnsPerClient caps the public connections open from one client
	// address, an IPv6 client's /64 counting as one; it may not exceed
	// max_conns. The immediate peers in identity.trusted_proxies count
	// only against max_conns.
	// Default: 256, or max_conns if that is less.
	// Range: 1 to max_conns.
	MaxConnsPerClient int `yaml:"max_conns_per_client"`
	// MaxConns caps all public connections. Over a cap a connection is
	// closed as soon as it is accepted.
	// Default: half the file descriptors the process may open, less 256 + admin_max_conns (at least 32, at most 16777216; 10000 if the limit is unknown).
	// Range: at least 1.
	MaxConns int `yaml:"max_conns"`
	// AdminMaxConns caps the admin listener's connections, a budget apart
	// from the public one.
	// Default: 64.
	// Range: at least 1.
	AdminMaxConns int `yaml:"admin_max_conns"`
}

// StoreSpec chooses where state lives.
type StoreSpec struct {
	// Type is the store that holds the limits' state: in this process's
	// memory, or in Redis, shared by every gateway that uses it.
	// Default: memory.
	// One of: memory, redis.
	Type string `yaml:"type"`
	// URL is the Redis URL, required for type redis (and only for it):
	// redis://host:port/db; more addresses as ?addr=host:port; a Sentinel
	// master as ?master_set=name (the addresses are then the sentinels').
	// Default: none.
	URL string `yaml:"url"`
	// Mode is how the gateway talks to Redis; sentinel needs
	// ?master_set=name in the URL.
	// Default: cluster when Redis says so, sentinel when the URL names a master_set, else standalone.
	// One of: standalone, cluster, sentinel.
	Mode string `yaml:"mode"`
	// MaxBytes bounds the in-memory store's state, e.g. 256MiB. When
	// full, it evicts what costs least to forget; see docs/design/stores.md.
	// Default: 256MiB.
	// Range: at least 1MiB.
	MaxBytes ByteSize `yaml:"max_bytes"`
	// MaxKeys, if set, also caps the in-memory store's keys.
	// Default: none.
	// Range: at least 0.
	MaxKeys int `yaml:"max_keys"`
	// Timeout bounds each call to Redis.
	// Default: 20ms.
	// Range: at least 1ms.
	Timeout time.Duration `yaml:"timeout"`
	// Instances is how many gateways share the Redis; while it is
	// unavailable, a fail_open route is limited locally to 1/Instances of
	// its limit.
	// Default: 1.
	// Range: at least 1.
	Instances int `yaml:"instances"`
	// CalendarFallback is what a fail_open route does with calendar quotas
	// (calendar: day or month) while Redis is unavailable: closed answers
	// 503, as a fail_closed route; share gives this instance's share of
	// what Redis last said remained (503 for a subject this instance has
	// not seen Redis decide since it started).
	// Default: closed.
	// One of: closed, share.
	CalendarFallback string `yaml:"calendar_fallback"`
	// Breaker tunes the circuit breaker in front of Redis.
	Breaker BreakerSpec `yaml:"breaker"`
}

// BreakerSpec tunes the circuit breaker in front of Redis.
type BreakerSpec struct {
	// Failures is how many consecutive failed calls to Redis open the
	// breaker.
	// Default: 5.
	// Range: 1 to 4294967295.
	Failures uint32 `yaml:"failures"`
	// OpenFor is how long the breaker stays open before it probes Redis.
	// Default: 1s.
	// Range: at least 0s.
	OpenFor time.Duration `yaml:"open_for"`
}

// IdentitySpec says how a request's subject is found.
type IdentitySpec struct {
	// Secret keys the HMAC that turns API key ids, user ids and IPs into
	// pseudonyms: at least 16 bytes. Set it or secret_env, not both; one
	// is required with a Redis store, so that every instance hashes
	// alike. Without either, the process generates one.
	// Default: none.
	Secret string `yaml:"secret"`
	// SecretEnv names the environment variable holding the secret, in
	// place of secret.
	// Default: none.
	SecretEnv string `yaml:"secret_env"`
	// UserHeader names the header a trusted auth proxy sets to the user id.
	// It is believed only from a trusted proxy.
	// Default: none.
	UserHeader string `yaml:"user_header"`
	// TrustedProxies lists the addresses and CIDRs whose forwarding
	// headers are believed. A list that covers all of IPv4 or IPv6
	// (however written), or more public space than a /8 (IPv4) or /24
	// (IPv6), loads with a warning.
	// Default: none.
	TrustedProxies []string `yaml:"trusted_proxies"`
	// AnonymousPlan names the plan that limits requests identified only
	// by client IP.
	// Default: the only plan; required when there are several.
	AnonymousPlan string `yaml:"anonymous_plan"`
	// UserPlan names the plan that limits requests identified by user id
	// (the user header's).
	// Default: identity.anonymous_plan.
	UserPlan string `yaml:"user_plan"`
	// MaxBody is the largest form, JSON or multipart body read for a
	// credential (an access_token field, which frameworks read as one);
	// a larger one is a 413.
	// Default: 1MiB.
	// Range: 1KiB to 64MiB.
	MaxBody ByteSize `yaml:"max_body"`
	// CredentialFields names the query, body and cookie fields the
	// services behind read a credential from (1 to 64 letters, digits,
	// "_", "-" or "." each); each is read however frameworks spell it.
	// Default: [access_token, bearer_token, api_token].
	CredentialFields []string `yaml:"credential_fields"`
	// JWT, if set, verifies bearer tokens that are JWTs (three
	// base64url parts, the first a JSON object) and charges each to the
	// subject its claims name; other bearer tokens stay API keys.
	// Default: none.
	JWT *JWTSpec `yaml:"jwt"`
}

// JWTSpec says how bearer JWTs are verified and whom they name. A token
// that does not verify (bad signature, unknown key, an algorithm not
// allowed, expired, not yet valid, another issuer or audience, no
// subject) is a 401 charged to the client address's invalid_key_limit,
// exactly like an unknown API key.
type JWTSpec struct {
	// JWKSURL is where the signing keys are published (https; http only
	// to a loopback host). Required when algorithms lists an asymmetric
	// algorithm (as the default does), and taken only then.
	// Default: none.
	JWKSURL string `yaml:"jwks_url"`
	// Issuer, if set, must be the token's iss.
	// Default: none.
	Issuer string `yaml:"issuer"`
	// Audience, if set, lists the audiences accepted: the token's aud
	// must name one of them.
	// Default: none.
	Audience []string `yaml:"audience"`
	// Algorithms lists the signature algorithms accepted, each once.
	// "none" is never accepted; HS256/HS384/HS512 only when listed here
	// and hmac_secret_env names the shared secret.
	// Default: [RS256, ES256, EdDSA].
	// One of: RS256, RS384, RS512, PS256, PS384, PS512, ES256, ES384, ES512, EdDSA, HS256, HS384, HS512.
	Algorithms []string `yaml:"algorithms"`
	// HMACSecretEnv names the environment variable holding the HMAC
	// secret (at least 32 bytes) of the HS* algorithms; required when
	// algorithms lists one, and taken only then.
	// Default: none.
	HMACSecretEnv string `yaml:"hmac_secret_env"`
	// ClockSkew is how far a token's exp, nbf and iat may be off.
	// Default: 30s.
	// Range: 0s to 5m.
	ClockSkew time.Duration `yaml:"clock_skew"`
	// SubjectClaim names the claim the subject is read from; not a
	// registered claim (iss, aud, exp, nbf, iat, jti).
	// Default: sub.
	SubjectClaim string `yaml:"subject_claim"`
	// TenantClaim, if set, names the claim the tenant is read from.
	// Default: none.
	TenantClaim string `yaml:"tenant_claim"`
	// PlanClaim, if set, names the claim the plan is read from.
	// Default: none.
	PlanClaim string `yaml:"plan_claim"`
	// DefaultPlan names the plan of a token whose plan claim is absent or
	// names no plan.
	// Default: identity.user_plan.
	DefaultPlan string `yaml:"default_plan"`
	// RefreshInterval is the longest the signing keys are kept before
	// they are fetched again.
	// Default: 15m.
	// Range: 1m to 24h.
	RefreshInterval time.Duration `yaml:"refresh_interval"`
	// MinRefreshInterval is the least time between two fetches of the
	// keys, whether the JWKS's Cache-Control asks for sooner or tokens
	// name a key id not in it.
	// Default: 30s.
	// Range: 1s to refresh_interval.
	MinRefreshInterval time.Duration `yaml:"min_refresh_interval"`
}

// LimitSpec is one limit as written: rate per period, enforced by an
// algorithm, or a calendar quota.
type LimitSpec struct {
	// Algorithm is how the limit is enforced ("-" may stand for "_", and
	// sliding_window_log and sliding_window_counter are accepted too). A
	// calendar quota is always fixed_window.
	// Default: gcra.
	// One of: gcra, token_bucket, leaky_bucket, fixed_window, sliding_log, sliding_counter.
	Algorithm string `yaml:"algorithm"`
	// Rate is how many requests (units of cost) the limit admits per
	// period, or per calendar day or month. Rate × period (in ms) must
	// stay below 2^50, and sliding_log takes at most 100000.
	// Default: none; required unless the plan is unlimited or has limits.
	// Range: at least 1.
	Rate int64 `yaml:"rate"`
	// Period is the time over which rate is admitted (e.g. 1m), in whole
	// milliseconds; a calendar quota takes none.
	// Default: required, unless calendar is set.
	// Range: 1ms to 73000d.
	Period time.Duration `yaml:"period"`
	// Burst is the most that can be spent at once by the bucket
	// algorithms (gcra, token_bucket, leaky_bucket); the window
	// algorithms take none, or one equal to rate.
	// Default: rate.
	// Range: at least 1.
	Burst int64 `yaml:"burst"`
	// MaxDelay makes a leaky_bucket limit shape traffic: a request that
	// does not fit is held up to this long to fit the rate, and refused
	// only beyond it. At most 1,000 requests may wait at once
	// (max_delay × rate / period), since each holds a connection.
	// Default: none.
	// Range: 0s to 30s.
	MaxDelay time.Duration `yaml:"max_delay"`
	// Calendar makes a quota that resets at local midnight (day) or on
	// the 1st of the month (month) in time_zone. It takes rate, and no
	// period, burst or max_delay.
	// Default: none.
	// One of: day, month.
	Calendar string `yaml:"calendar"`
	// TimeZone is the IANA time zone of a calendar quota's days; only a
	// calendar quota takes it.
	// Default: the file's time_zone, else UTC.
	TimeZone string `yaml:"time_zone"`
	// Shadow evaluates and counts this limit exactly as if enforced, but
	// it never refuses a request or changes a response: for trying a limit
	// on live traffic before enforcing it. The guards (invalid_key_limit,
	// a login's ip_failures) are always enforced and refuse it.
	// Default: false.
	Shadow bool `yaml:"shadow"`
}

// KeySpec is one API key. The key itself is never stored: Digest is
// "sha256:" and the hex SHA-256 of it (`echo KEY | tollgate hash-key` prints it).
type KeySpec struct {
	// ID names the key in logs, metrics and the allowlist: 1 to 64
	// letters, digits, ".", "_" or "-", unique among the keys.
	// Default: required.
	ID string `yaml:"id" json:"id,omitempty"`
	// Digest is "sha256:" and the 64 lower-case hex digits of the key's
	// SHA-256, never the key itself.
	// Default: required.
	Digest string `yaml:"digest" json:"digest"`
	// Tenant names the key's tenant (1 to 128 bytes of UTF-8, no control
	// characters), whose tenant budget and plan override it shares.
	// Default: none.
	Tenant string `yaml:"tenant" json:"tenant,omitempty"`
	// User names the key's user (1 to 128 bytes of UTF-8, no control
	// characters).
	// Default: none.
	User string `yaml:"user" json:"user,omitempty"`
	// Plan names the key's plan (unless its tenant's overrides it).
	// Default: required.
	Plan string `yaml:"plan" json:"plan"`
}

// HeaderSpec chooses optional response headers.
type HeaderSpec struct {
	// Legacy adds the X-RateLimit-Limit, -Remaining and -Reset headers to
	// the responses, beside the RateLimit ones.
	// Default: false.
	Legacy bool `yaml:"legacy"`
	// LLM adds, on token routes, the x-ratelimit-limit-, -remaining- and
	// -reset-requests and -tokens headers LLM clients read (as OpenAI
	// sends them), for the most restrictive request and token budgets.
	// Default: false.
	LLM bool `yaml:"llm"`
}

// LogSpec configures the gateway's logs: JSON (or text) lines on
// standard error.
type LogSpec struct {
	// Level is the least severe level logged.
	// Default: info.
	// One of: debug, info, warn, error.
	Level string `yaml:"level"`
	// Format is how each log line is written.
	// Default: json.
	// One of: json, text.
	Format string `yaml:"format"`
	// AccessSample is the share of requests the access log writes a line
	// for, from 0 (none) to 1 (every one).
	// Default: 1.
	// Range: 0 to 1.
	AccessSample *float64 `yaml:"access_sample"`
	// AccessPerSecond bounds the access log's lines per second, so that a
	// flood of requests cannot flood the log: lines past it are dropped
	// and counted (tollgate_access_log_dropped_total).
	// Default: 1000.
	// Range: at least 1.
	AccessPerSecond int `yaml:"access_per_second"`
}

// TracingSpec configures OpenTelemetry tracing: a server span per public
// request, a child span per store call and one around the call to the
// upstream, whose W3C trace context the upstream receives.
type TracingSpec struct {
	// Endpoint is the OTLP/HTTP collector's base URL, e.g.
	// http://collector:4318 (spans are posted to its /v1/traces); http or
	// https, without credentials, query or fragment. Without it (nor the
	// environment variable) there is no tracing.
	// Default: the environment variable OTEL_EXPORTER_OTLP_ENDPOINT, else none.
	Endpoint string `yaml:"endpoint"`
	// Sample is the share of new traces recorded. A request that
	// continues a trace (see identity.trusted_proxies) follows its
	// parent's decision instead.
	// Default: 1.
	// Range: 0 to 1.
	Sample *float64 `yaml:"sample"`
	// ServiceName names the gateway in the traces: at most 255 printable
	// characters.
	// Default: the environment variable OTEL_SERVICE_NAME, else tollgate.
	ServiceName string `yaml:"service_name"`
}

// UpstreamSpec configures calls to upstreams.
type UpstreamSpec struct {
	// Timeout bounds the wait for an upstream's response headers; it must
	// be positive.
	// Default: 30s.
	Timeout time.Duration `yaml:"timeout"`
}
