// Package envoyrls serves Envoy's rate-limit service
// (envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit) over gRPC,
// a drop-in for envoyproxy/ratelimit: it reads that service's
// configuration unchanged (a directory of YAML files, each a domain with
// nested descriptors), reloads it when the directory changes, and decides
// every request through Tollgate's engine, so the stores, the deny cache,
// the local fallback and the metrics are the gateway's.
//
// Counting is envoyproxy/ratelimit's: fixed windows of the descriptor's
// unit aligned to the Unix epoch (a window starts at now - now % unit,
// with a month of 30 days and a year of 365), with one difference that is
// their STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT always on, made exact: a
// request over the limit of any descriptor charges none of them, in one
// atomic store call. A descriptor may also name any Tollgate algorithm.
package envoyrls

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"gopkg.in/yaml.v3"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/algo"
	"github.com/tollgate/tollgate/policy"
)

// LoadOptions says how to read a configuration directory. The zero value
// is envoyproxy/ratelimit's default.
type LoadOptions struct {
	// MergeDomains lets several files configure one domain, their
	// descriptors merged (MERGE_DOMAIN_CONFIG); by default a domain
	// configured twice is an error.
	MergeDomains bool
	// IgnoreDotFiles skips files and directories whose names begin with
	// a dot (RUNTIME_IGNOREDOTFILES).
	IgnoreDotFiles bool
	// FailClosed is the failure mode of a domain whose file does not set
	// on_store_failure.
	FailClosed bool
}

// Config is a loaded configuration: every domain and its descriptors.
// It is immutable.
type Config struct {
	domains map[string]*Domain
	// Files lists the files read, in the order read.
	Files []string
}

// Domain is one domain's descriptors.
type Domain struct {
	Name string
	// FailClosed answers OVER_LIMIT for the domain's requests when the
	// store cannot decide them (on_store_failure: fail_closed); otherwise
	// the local fallback decides, or the request is admitted.
	FailClosed bool
	root       node
}

// Domain returns the named domain, or nil.
func (c *Config) Domain(name string) *Domain { return c.domains[name] }

// Domains returns the names of the configured domains, sorted.
func (c *Config) Domains() []string {
	names := make([]string, 0, len(c.domains))
	for n := range c.domains {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// entryKey is a descriptor entry as configured: a key and a value, the
// empty value matching any value the key has no entry of its own for.
type entryKey struct{ key, value string }

// node is one level of a domain's descriptors.
type node struct {
	children map[entryKey]*node
	// wildcards are the children whose value holds '*', in the order
	// configured; the first that matches wins.
	wildcards []*node
	parts     []string // a wildcard child's value split on '*'
	entry     entryKey
	limit     *Limit // nil: no limit at this level
	// shareThreshold: requests matched by this wildcard share one
	// budget (and one metric), as if their value were the pattern.
	shareThreshold bool
	valueToMetric  bool
}

// Limit is one descriptor's rate limit.
type Limit struct {
	// Budget is what Tollgate counts: nil for an unlimited descriptor and
	// for requests_per_unit 0 (which admits nothing).
	Budget          *policy.Budget
	RequestsPerUnit uint32
	Unit            rlspb.RateLimitResponse_RateLimit_Unit
	Unlimited       bool
	Shadow          bool
	Name            string
	Replaces        []string
	DetailedMetric  bool
	// StatKey is the descriptor's key in the metrics, as
	// envoyproxy/ratelimit spells it: the domain, then each level's
	// key_value or key, joined by '.'.
	StatKey string
	// Period is the unit's duration.
	Period time.Duration

	proto *rlspb.RateLimitResponse_RateLimit // current_limit, shared
}

// unitPeriods are the units' durations, as envoyproxy/ratelimit divides
// time: a month is 30 days and a year 365.
var unitPeriods = map[rlspb.RateLimitResponse_RateLimit_Unit]time.Duration{
	rlspb.RateLimitResponse_RateLimit_SECOND: time.Second,
	rlspb.RateLimitResponse_RateLimit_MINUTE: time.Minute,
	rlspb.RateLimitResponse_RateLimit_HOUR:   time.Hour,
	rlspb.RateLimitResponse_RateLimit_DAY:    24 * time.Hour,
	rlspb.RateLimitResponse_RateLimit_WEEK:   7 * 24 * time.Hour,
	rlspb.RateLimitResponse_RateLimit_MONTH:  30 * 24 * time.Hour,
	rlspb.RateLimitResponse_RateLimit_YEAR:   365 * 24 * time.Hour,
}

// The YAML schema: envoyproxy/ratelimit's, and two keys of Tollgate's
// (on_store_failure on a file, algorithm in a rate_limit).
type fileYAML struct {
	Domain         string     `yaml:"domain"`
	Descriptors    []descYAML `yaml:"descriptors"`
	OnStoreFailure string     `yaml:"on_store_failure"`
}

type descYAML struct {
	Key            string         `yaml:"key"`
	Value          string         `yaml:"value"`
	RateLimit      *rateLimitYAML `yaml:"rate_limit"`
	Descriptors    []descYAML     `yaml:"descriptors"`
	ShadowMode     bool           `yaml:"shadow_mode"`
	QuotaMode      bool           `yaml:"quota_mode"`
	DetailedMetric bool           `yaml:"detailed_metric"`
	ValueToMetric  bool           `yaml:"value_to_metric"`
	ShareThreshold bool           `yaml:"share_threshold"`
	Metadata       map[string]any `yaml:"metadata"`
	line           int
}

func (d *descYAML) UnmarshalYAML(n *yaml.Node) error {
	type plain descYAML
	if err := n.Decode((*plain)(d)); err != nil {
		return err
	}
	d.line = n.Line
	return nil
}

type rateLimitYAML struct {
	RequestsPerUnit uint32 `yaml:"requests_per_unit"`
	Unit            string `yaml:"unit"`
	Unlimited       bool   `yaml:"unlimited"`
	Name            string `yaml:"name"`
	Replaces        []struct {
		Name string `yaml:"name"`
	} `yaml:"replaces"`
	Algorithm string `yaml:"algorithm"`
}

// validKeys are the keys a file may hold, at any depth, as
// envoyproxy/ratelimit checks them (a known key in the wrong place is
// ignored there, and here), with Tollgate's two.
var validKeys = map[string]bool{
	"domain": true, "key": true, "value": true, "descriptors": true, "rate_limit": true, "unit": true,
	"requests_per_unit": true, "unlimited": true, "shadow_mode": true, "quota_mode": true, "name": true,
	"replaces": true, "detailed_metric": true, "value_to_metric": true, "share_threshold": true, "metadata": true,
	"on_store_failure": true, "algorithm": true,
}

// Load reads every file under dir (recursively, in lexical order), each
// one domain's configuration. Every problem is reported, each with its
// file and line; a configuration with any is refused whole.
func Load(dir string, opts LoadOptions) (*Config, error) {
	var files []string
	// The directory may be a symlink (RUNTIME_ROOT's "current"): read
	// where it points now.
	dir, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return nil, fmt.Errorf("loading rate-limit configuration: %w", err)
	}
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if opts.IgnoreDotFiles && path != dir && strings.HasPrefix(d.Name(), ".") {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.Type().IsRegular() || d.Type()&fs.ModeSymlink != 0 && !isDir(path) {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("loading rate-limit configuration: %w", err)
	}
	srcs := make([]Source, 0, len(files))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("loading rate-limit configuration: %w", err)
		}
		srcs = append(srcs, Source{Name: f, Data: b})
	}
	return Parse(srcs, opts)
}

func isDir(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.IsDir()
}

// Source is one configuration file's name and contents.
type Source struct {
	Name string
	Data []byte
}

// Parse reads configuration files (see [Load]).
func Parse(files []Source, opts LoadOptions) (*Config, error) {
	p := &parser{cfg: &Config{domains: map[string]*Domain{}}, opts: opts}
	for _, f := range files {
		p.file(f)
	}
	if len(p.errs) > 0 {
		return nil, errors.Join(p.errs...)
	}
	return p.cfg, nil
}

type parser struct {
	cfg  *Config
	opts LoadOptions
	errs []error
	name string // the file being read
}

func (p *parser) addf(line int, format string, args ...any) {
	at := p.name
	if line > 0 {
		at = fmt.Sprintf("%s:%d", p.name, line)
	}
	p.errs = append(p.errs, fmt.Errorf("%s: %s", at, fmt.Sprintf(format, args...)))
}

func (p *parser) file(f Source) {
	p.name = f.Name
	p.cfg.Files = append(p.cfg.Files, f.Name)
	var doc yaml.Node
	if err := yaml.Unmarshal(f.Data, &doc); err != nil {
		p.addf(0, "reading YAML: %v", err)
		return
	}
	if len(doc.Content) == 0 {
		p.addf(0, "config file cannot have empty domain")
		return
	}
	if !p.keys(doc.Content[0]) {
		return
	}
	var y fileYAML
	if err := doc.Content[0].Decode(&y); err != nil {
		p.addf(0, "reading YAML: %v", err)
		return
	}
	if y.Domain == "" {
		p.addf(doc.Content[0].Line, "config file cannot have empty domain")
		return
	}
	failClosed := p.opts.FailClosed
	switch y.OnStoreFailure {
	case "":
	case "fail_open":
		failClosed = false
	case "fail_closed":
		failClosed = true
	default:
		p.addf(doc.Content[0].Line, "on_store_failure: want fail_open or fail_closed, got %q", y.OnStoreFailure)
		return
	}
	d, ok := p.cfg.domains[y.Domain]
	switch {
	case ok && !p.opts.MergeDomains:
		p.addf(doc.Content[0].Line, "duplicate domain '%s' in config file (MERGE_DOMAIN_CONFIG merges them)", y.Domain)
		return
	case ok && y.OnStoreFailure != "" && failClosed != d.FailClosed:
		p.addf(doc.Content[0].Line, "domain '%s' is configured with another on_store_failure in another file", y.Domain)
		return
	case !ok:
		d = &Domain{Name: y.Domain, FailClosed: failClosed}
		p.cfg.domains[y.Domain] = d
	}
	if y.OnStoreFailure != "" {
		d.FailClosed = failClosed
	}
	p.descriptors(d, &d.root, nil, y.Descriptors)
}

// keys checks every mapping key in n against validKeys, as
// envoyproxy/ratelimit does (metadata's contents are free).
func (p *parser) keys(n *yaml.Node) bool {
	ok := true
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Kind != yaml.ScalarNode || !validKeys[k.Value] {
				p.addf(k.Line, "config error, unknown key '%s'", k.Value)
				ok = false
				continue
			}
			if k.Value != "metadata" && !p.keys(v) {
				ok = false
			}
		}
	case yaml.SequenceNode:
		for _, e := range n.Content {
			if e.Kind != yaml.MappingNode && e.Kind != yaml.ScalarNode {
				p.addf(e.Line, "config error, yaml file contains list of type other than map")
				ok = false
				continue
			}
			if !p.keys(e) {
				ok = false
			}
		}
	}
	return ok
}

func (p *parser) descriptors(d *Domain, parent *node, path []policy.RLSEntry, ds []descYAML) {
	for _, y := range ds {
		if y.Key == "" {
			p.addf(y.line, "descriptor has empty key")
			continue
		}
		ek := entryKey{y.Key, y.Value}
		full := append(slices.Clip(path), policy.RLSEntry{Key: y.Key, Value: y.Value})
		if parent.children == nil {
			parent.children = map[entryKey]*node{}
		}
		if _, dup := parent.children[ek]; dup {
			p.addf(y.line, "duplicate descriptor composite key '%s'", d.Name+"."+statPath(full))
			continue
		}
		n := &node{entry: ek, valueToMetric: y.ValueToMetric, shareThreshold: y.ShareThreshold}
		wild := strings.Contains(y.Value, "*")
		if y.ShareThreshold && !wild {
			p.addf(y.line, "share_threshold can only be used with wildcard values (containing '*'), but found key '%s'", statPath(full[len(full)-1:]))
			continue
		}
		if y.QuotaMode {
			p.addf(y.line, "quota_mode is not supported by Tollgate")
			continue
		}
		if y.RateLimit != nil {
			l, ok := p.limit(d, full, y)
			if !ok {
				continue
			}
			n.limit = l
		}
		if wild {
			n.parts = strings.Split(y.Value, "*")
			parent.wildcards = append(parent.wildcards, n)
		}
		parent.children[ek] = n
		p.descriptors(d, n, full, y.Descriptors)
	}
}

func (p *parser) limit(d *Domain, path []policy.RLSEntry, y descYAML) (*Limit, bool) {
	r := y.RateLimit
	unit, known := rlspb.RateLimitResponse_RateLimit_Unit_value[strings.ToUpper(r.Unit)]
	valid := known && unit != int32(rlspb.RateLimitResponse_RateLimit_UNKNOWN)
	switch {
	case r.Unlimited && valid:
		p.addf(y.line, "should not specify rate limit unit when unlimited")
		return nil, false
	case !r.Unlimited && !valid:
		p.addf(y.line, "invalid rate limit unit '%s'", r.Unit)
		return nil, false
	case r.Unlimited && r.Algorithm != "":
		p.addf(y.line, "an unlimited descriptor takes no algorithm")
		return nil, false
	}
	l := &Limit{
		RequestsPerUnit: r.RequestsPerUnit, Unit: rlspb.RateLimitResponse_RateLimit_Unit(unit), Unlimited: r.Unlimited,
		Shadow: y.ShadowMode, Name: r.Name, DetailedMetric: y.DetailedMetric, StatKey: d.Name + "." + statPath(path),
	}
	for _, rep := range r.Replaces {
		switch {
		case rep.Name == "":
			p.addf(y.line, "should not have an empty replaces entry")
			return nil, false
		case rep.Name == r.Name:
			p.addf(y.line, "replaces should not contain name of same descriptor")
			return nil, false
		}
		l.Replaces = append(l.Replaces, rep.Name)
	}
	if r.Unlimited {
		return l, true
	}
	l.Period = unitPeriods[l.Unit]
	l.proto = &rlspb.RateLimitResponse_RateLimit{Name: r.Name, RequestsPerUnit: r.RequestsPerUnit, Unit: l.Unit}
	if r.RequestsPerUnit == 0 {
		return l, true
	}
	lim := tollgate.Limit{Algorithm: algo.FixedWindow, Rate: int64(r.RequestsPerUnit), Period: l.Period}
	if r.Algorithm != "" {
		a, err := algo.ParseAlgorithm(r.Algorithm)
		if err != nil {
			p.addf(y.line, "%v", err)
			return nil, false
		}
		lim.Algorithm = a
	}
	name := r.Name
	if name == "" {
		name = l.StatKey
	}
	b, err := policy.RLSBudget(name, d.Name, path, lim, y.ShadowMode)
	if err != nil {
		p.addf(y.line, "%v", err)
		return nil, false
	}
	l.Budget = b
	return l, true
}

// statPath is a descriptor path as envoyproxy/ratelimit's stat keys spell
// it: key_value or key, joined by '.'.
func statPath(path []policy.RLSEntry) string {
	var sb strings.Builder
	for i, e := range path {
		if i > 0 {
			sb.WriteByte('.')
		}
		sb.WriteString(e.Key)
		if e.Value != "" {
			sb.WriteByte('_')
			sb.WriteString(e.Value)
		}
	}
	return sb.String()
}

// match reports whether value matches the wildcard pattern split into
// parts (each '*' matches any run of bytes, possibly empty).
func match(parts []string, value string) bool {
	if len(parts) == 1 {
		return parts[0] == value
	}
	first, last := parts[0], parts[len(parts)-1]
	if len(value) < len(first)+len(last) || !strings.HasPrefix(value, first) || !strings.HasSuffix(value, last) {
		return false
	}
	rest := value[len(first) : len(value)-len(last)]
	for _, mid := range parts[1 : len(parts)-1] {
		i := strings.Index(rest, mid)
		if i < 0 {
			return false
		}
		rest = rest[i+len(mid):]
	}
	return true
}
