package client

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Limit is one rate limit a response reported. Unknown numbers are -1
// (durations: -1 as well).
type Limit struct {
	// Name is the policy's name ("free.minute"); empty when the server
	// names none (legacy X-RateLimit-* fields, draft-07 fields).
	Name string
	// Remaining is what is left of the quota (RateLimit r=).
	Remaining int64
	// Reset is how long until the quota is back (RateLimit t=).
	Reset time.Duration
	// Quota and Window are the policy (RateLimit-Policy q= and w=).
	Quota  int64
	Window time.Duration
}

// Info is what a response says about rate limits.
type Info struct {
	// RetryAfter is the Retry-After field, when HasRetryAfter.
	RetryAfter    time.Duration
	HasRetryAfter bool
	// Limit is the limit the RateLimit field (or its legacy spellings)
	// reports, when HasLimit: the most restrictive one when it lists
	// several.
	Limit    Limit
	HasLimit bool
	// Policies are the RateLimit-Policy items.
	Policies []Limit
}

// ParseRetryAfter reads a Retry-After value: delay-seconds, or an
// HTTP-date taken relative to date (the response's Date field) when that
// parses, else relative to now. A date in the past is a zero delay.
func ParseRetryAfter(v, date string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil {
		// Only integers are standard; fractions are read leniently.
		if s < 0 || math.IsNaN(s) {
			return 0, false
		}
		return secs(s), true
	}
	return dateDelay(v, date, now)
}

// dateDelay reads the HTTP-date v as a delay from date, when that parses,
// else from now; a date in the past is a zero delay.
func dateDelay(v, date string, now time.Time) (time.Duration, bool) {
	at, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	if d, err := http.ParseTime(strings.TrimSpace(date)); err == nil && date != "" {
		now = d
	}
	return max(0, at.Sub(now)), true
}

// secs converts s seconds to a duration, saturating instead of overflowing.
func secs(s float64) time.Duration {
	if s >= float64(math.MaxInt64)/float64(time.Second) {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(s * float64(time.Second))
}

// ParseResponse reads the rate-limit fields of h: Retry-After, RateLimit
// and RateLimit-Policy per draft-ietf-httpapi-ratelimit-headers (items
// "name";r=..;t=.. and "name";q=..;w=..), leniently, and the older
// spellings other servers send: draft-07's RateLimit: limit=, remaining=,
// reset= and RateLimit-Policy: 100;w=60; RateLimit-Limit/-Remaining/-Reset;
// X-RateLimit-Limit/-Remaining/-Reset (and X-Rate-Limit-*), whose Reset
// is read as a Unix time when it is one (GitHub's) and as seconds
// otherwise. now is the local time, for dates.
func ParseResponse(h http.Header, now time.Time) Info {
	var info Info
	if v := h.Get("Retry-After"); v != "" {
		info.RetryAfter, info.HasRetryAfter = ParseRetryAfter(v, h.Get("Date"), now)
	}
	info.Policies = policies(h, now)
	info.Limit, info.HasLimit = mostRestrictive(reported(h, now))
	if info.HasLimit {
		for _, p := range info.Policies {
			if p.Name == info.Limit.Name {
				info.Limit.Quota, info.Limit.Window = p.Quota, p.Window
				break
			}
		}
	}
	return info
}

// policies reads the RateLimit-Policy items that name a policy or give a
// quota.
func policies(h http.Header, now time.Time) []Limit {
	var out []Limit
	for _, v := range h.Values("RateLimit-Policy") {
		for _, it := range items(v) {
			l := it.limit(now)
			if l.Quota >= 0 || l.Name != "" {
				out = append(out, l)
			}
		}
	}
	return out
}

// reported reads the limits the RateLimit fields report, in either
// draft's form, or else the first legacy spelling present.
func reported(h http.Header, now time.Time) []Limit {
	var found []Limit
	for _, v := range h.Values("RateLimit") {
		if l, ok := draft07(v, now); ok {
			found = append(found, l)
			continue
		}
		for _, it := range items(v) {
			if l := it.limit(now); l.Remaining >= 0 || l.Reset >= 0 {
				found = append(found, l)
			}
		}
	}
	if len(found) == 0 {
		if l, ok := anyLegacy(h, now); ok {
			found = append(found, l)
		}
	}
	return found
}

// anyLegacy reads the first of RateLimit-*, X-RateLimit-* and
// X-Rate-Limit-* that reports a limit.
func anyLegacy(h http.Header, now time.Time) (Limit, bool) {
	for _, prefix := range []string{"RateLimit-", "X-RateLimit-", "X-Rate-Limit-"} {
		if l, ok := legacy(h, prefix, now); ok {
			return l, true
		}
	}
	return Limit{}, false
}

// mostRestrictive is the limit of found that leaves the least (see
// restrictive), the first of equals; false when found is empty.
func mostRestrictive(found []Limit) (Limit, bool) {
	if len(found) == 0 {
		return Limit{}, false
	}
	most := found[0]
	for _, l := range found[1:] {
		if restrictive(l, most) {
			most = l
		}
	}
	return most, true
}

// restrictive reports whether a says less is left than b (or, as much,
// for longer).
func restrictive(a, b Limit) bool {
	ar, br := unknownLast(a.Remaining), unknownLast(b.Remaining)
	if ar != br {
		return ar < br
	}
	return a.Reset > b.Reset
}

// unknownLast orders an unknown count (-1) after every known one.
func unknownLast(n int64) int64 {
	if n < 0 {
		return math.MaxInt64
	}
	return n
}

// item is one member of a structured-field list: a bare item and its
// parameters.
type item struct {
	bare   string
	params map[string]string
}

// items splits a structured-field list leniently: commas and semicolons
// inside quotes are kept, quotes around strings are dropped, keys are
// lower-cased.
func items(v string) []item {
	var out []item
	for _, member := range splitQuoted(v, ',') {
		parts := splitQuoted(member, ';')
		if len(parts) == 0 {
			continue
		}
		it := item{bare: unquote(parts[0]), params: map[string]string{}}
		for _, p := range parts[1:] {
			k, val, _ := strings.Cut(p, "=")
			it.params[strings.ToLower(strings.TrimSpace(k))] = unquote(val)
		}
		out = append(out, it)
	}
	return out
}

// limit reads an item as a Limit: r/remaining, t/reset, q/limit/quota,
// w/window; a bare integer is a quota (draft-07's RateLimit-Policy).
func (it item) limit(now time.Time) Limit {
	l := Limit{Name: it.bare, Remaining: -1, Reset: -1, Quota: -1}
	if n, err := strconv.ParseInt(it.bare, 10, 64); err == nil {
		l.Name, l.Quota = "", n
	}
	l.Remaining = count(it.param("r", "remaining"))
	if d, ok := seconds(it.param("t", "reset"), now); ok {
		l.Reset = d
	}
	if q := count(it.param("q", "limit", "quota")); q >= 0 {
		l.Quota = q
	}
	if d, ok := seconds(it.param("w", "window"), now); ok {
		l.Window = d
	}
	return l
}

// param is the value of the first of keys the item has as a parameter,
// or "".
func (it item) param(keys ...string) string {
	for _, k := range keys {
		if v, ok := it.params[k]; ok {
			return v
		}
	}
	return ""
}

// draft07 reads the draft-07 dictionary form, limit=100, remaining=50,
// reset=30.
func draft07(v string, now time.Time) (Limit, bool) {
	l := Limit{Remaining: -1, Reset: -1, Quota: -1}
	ok := false
	for _, member := range splitQuoted(v, ',') {
		k, val, has := strings.Cut(member, "=")
		if !has || strings.Contains(k, ";") {
			return l, false
		}
		switch strings.ToLower(strings.TrimSpace(k)) {
		case "limit":
			l.Quota = count(unquote(val))
		case "remaining":
			l.Remaining, ok = count(unquote(val)), true
		case "reset":
			if d, good := seconds(unquote(val), now); good {
				l.Reset, ok = d, true
			}
		default:
			return l, false
		}
	}
	return l, ok
}

// legacy reads prefix+Limit, Remaining and Reset.
func legacy(h http.Header, prefix string, now time.Time) (Limit, bool) {
	l := Limit{Remaining: -1, Reset: -1, Quota: -1}
	l.Quota = count(firstItem(h.Get(prefix + "Limit")))
	l.Remaining = count(firstItem(h.Get(prefix + "Remaining")))
	if d, ok := seconds(firstItem(h.Get(prefix+"Reset")), now); ok {
		l.Reset = d
	} else if d, ok := seconds(h.Get(prefix+"Reset-After"), now); ok {
		l.Reset = d
	}
	return l, l.Remaining >= 0 || l.Reset >= 0
}

// firstItem drops what follows a comma or semicolon ("100, 100;w=60").
func firstItem(v string) string {
	if i := strings.IndexAny(v, ",;"); i >= 0 {
		v = v[:i]
	}
	return strings.TrimSpace(v)
}

// count reads a non-negative integer; -1 when it is not one.
func count(v string) int64 {
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if err != nil || n < 0 {
		return -1
	}
	return n
}

// epochFloor separates a Unix time from a delay in seconds: no reset is
// 30 years away.
const epochFloor = 1e9

// seconds reads delay-seconds (fractions allowed), or a Unix time when the
// number is one.
func seconds(v string, now time.Time) (time.Duration, bool) {
	s, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
	if err != nil || s < 0 || math.IsNaN(s) || math.IsInf(s, 0) {
		return 0, false
	}
	if s >= epochFloor {
		at := time.Unix(0, 0).Add(secs(s))
		return max(0, at.Sub(now)), true
	}
	return secs(s), true
}

// splitQuoted splits v at sep outside double quotes, trimming spaces and
// dropping empty parts.
func splitQuoted(v string, sep byte) []string {
	var out []string
	quoted, escaped, start := false, false, 0
	for i := 0; i <= len(v); i++ {
		if i < len(v) {
			c := v[i]
			switch {
			case escaped:
				escaped = false
				continue
			case c == '\\' && quoted:
				escaped = true
				continue
			case c == '"':
				quoted = !quoted
				continue
			case c != sep || quoted:
				continue
			}
		}
		if p := strings.TrimSpace(v[start:i]); p != "" {
			out = append(out, p)
		}
		start = i + 1
	}
	return out
}

// unquote drops the double quotes around a structured-field string (and
// its escapes); anything else is returned trimmed.
func unquote(v string) string {
	v = strings.TrimSpace(v)
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
		v = v[1 : len(v)-1]
		if strings.Contains(v, `\`) {
			var sb strings.Builder
			for i := 0; i < len(v); i++ {
				if v[i] == '\\' && i+1 < len(v) {
					i++
				}
				sb.WriteByte(v[i])
			}
			v = sb.String()
		}
	}
	return v
}
