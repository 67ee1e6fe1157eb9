package policy

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// CheckRedisURL reports whether u is a Redis URL the store can use:
// redis:// or rediss:// (TLS; valkey:// and valkeys:// alike) with a host,
// an optional port and an optional database (/db or ?db=), or unix:// and
// a socket path; more addresses as ?addr=host:port, a Sentinel master as
// ?master_set=name, and the options dial_timeout and write_timeout
// (durations) and skip_verify (a boolean, for TLS). It refuses every URL
// the Redis store refuses to open, and also those the store would read as
// what they cannot mean: no host (the store would take localhost), a port
// out of 1-65535, a negative database, an empty or malformed addr.
func CheckRedisURL(u string) error {
	if err := checkRedisURL(u); err != nil {
		return fmt.Errorf("parsing redis url: %w", err)
	}
	return nil
}

// checkRedisURL is CheckRedisURL, its error unwrapped.
func checkRedisURL(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return err
	}
	tls, err := redisScheme(u, s)
	if err != nil {
		return err
	}
	if u.Scheme != "unix" {
		if err := checkRedisAddr(u.Host); err != nil {
			return err
		}
		if err := checkRedisPath(u.Path); err != nil {
			return err
		}
	}
	return checkRedisQuery(u.Query(), tls)
}

// redisScheme checks the URL's scheme (and a unix URL's socket path), and
// reports whether it asks for TLS.
func redisScheme(u *url.URL, s string) (tls bool, err error) {
	switch u.Scheme {
	case "redis", "valkey":
		return false, nil
	case "rediss", "valkeys":
		return true, nil
	case "unix":
		if strings.TrimSpace(u.Path) == "" {
			return false, fmt.Errorf("want unix:// and the socket's path, got %q", s)
		}
		return false, nil
	}
	return false, fmt.Errorf("unknown scheme %q (want redis://host:port/db, rediss:// or unix://)", u.Scheme)
}

// checkRedisPath checks the path of a host URL: empty, or one database
// number: /0, never / or /0/1.
func checkRedisPath(p string) error {
	if p == "" {
		return nil
	}
	db, more := strings.CutPrefix(p, "/")
	if !more || strings.Contains(db, "/") {
		return fmt.Errorf("the path %q is not /<database number>", p)
	}
	return checkDB(db)
}

// checkRedisQuery checks the URL's options: db, the timeouts, skip_verify
// (read only with TLS) and every addr.
func checkRedisQuery(q url.Values, tls bool) error {
	if q.Has("db") {
		if err := checkDB(q.Get("db")); err != nil {
			return err
		}
	}
	if err := checkRedisTimeouts(q); err != nil {
		return err
	}
	if v := q.Get("skip_verify"); tls && v != "" {
		if _, err := strconv.ParseBool(v); err != nil {
			return fmt.Errorf("skip_verify=%q is not true or false", v)
		}
	}
	return checkRedisAddrs(q["addr"])
}

// checkRedisTimeouts checks the URL's options dial_timeout and
// write_timeout, when set: durations.
func checkRedisTimeouts(q url.Values) error {
	for _, name := range []string{"dial_timeout", "write_timeout"} {
		if !q.Has(name) {
			continue
		}
		if _, err := time.ParseDuration(q.Get(name)); err != nil {
			return fmt.Errorf("%s=%q is not a duration (e.g. 500ms)", name, q.Get(name))
		}
	}
	return nil
}

// checkRedisAddrs checks the URL's addr options: each a host with an
// optional port.
func checkRedisAddrs(addrs []string) error {
	for _, a := range addrs {
		if err := checkRedisAddr(a); err != nil {
			return fmt.Errorf("addr=%q: %w", a, err)
		}
	}
	return nil
}

// checkRedisAddr checks a host with an optional port.
func checkRedisAddr(hostport string) error {
	host, port := splitRedisAddr(hostport)
	if host == "" {
		return fmt.Errorf("no host in %q (want host or host:port)", hostport)
	}
	if port != "" {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("the port %q is not 1-65535", port)
		}
	}
	return nil
}

// splitRedisAddr splits a host with an optional port; an IPv6 host may
// be in brackets without one.
func splitRedisAddr(hostport string) (host, port string) {
	if h, p, err := net.SplitHostPort(hostport); err == nil {
		return h, p
	}
	if strings.HasPrefix(hostport, "[") && strings.HasSuffix(hostport, "]") {
		return hostport[1 : len(hostport)-1], ""
	}
	return hostport, ""
}

// checkDB checks a database number.
func checkDB(db string) error {
	if n, err := strconv.Atoi(db); err != nil || n < 0 {
		return fmt.Errorf("the database number %q is not 0 or more", db)
	}
	return nil
}
