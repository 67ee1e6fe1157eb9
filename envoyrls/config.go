// Package envoyrls serves Envoy's rate-limit service
// (envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit) over gRPC,
// a drop-in for envoyproxy/ratelimit: it reads that service's
// configuration unchanged (a directory of YAML files, each a domain with
// nested descriptors), reloads it when the directory changes (or takes it
// from an xDS control plane, see [Server.WatchXDS]), and decides
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
	// AfterResponse charges the limit's hits as debt, never refusing
	// them (rateLimitYAML.AfterResponse).
	AfterResponse  bool
	Name           string
	Replaces       []string
	DetailedMetric bool
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
	// AfterResponse (Tollgate's) marks the limit Envoy charges when a
	// response ends (apply_on_stream_done, its hits_addend the tokens the
	// response used): its hits are charged as debt, never refused.
	AfterResponse bool `yaml:"after_response"`
}

// validKeys are the keys a file may hold, at any depth, as
// envoyproxy/ratelimit checks them (a known key in the wrong place is
// ignored there, and here), with Tollgate's three.
var validKeys = map[string]bool{
	"domain": true, "key": true, "value": true, "descriptors": true, "rate_limit": true, "unit": true,
	"requests_per_unit": true, "unlimited": true, "shadow_mode": true, "quota_mode": true, "name": true,
	"replaces": true, "detailed_metric": true, "value_to_metric": true, "share_threshold": true, "metadata": true,
	"on_store_failure": true, "algorithm": true, "after_response": true,
}

// Load reads every file under dir (recursively, in lexical order), each
// one domain's configuration. Every problem is reported, each with its
// file and line; a configuration with any is refused whole.
func Load(dir string, opts LoadOptions) (*Config, error) {
	files, err := configFiles(dir, opts)
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

// configFiles lists the files under dir, recursively and in lexical
// order, skipping dot files when opts says so.
func configFiles(dir string, opts LoadOptions) ([]string, error) {
	// The directory may be a symlink (RUNTIME_ROOT's "current"): read
	// where it points now.
	dir, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return nil, err
	}
	var files []string
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
		if isFile(path, d) {
			files = append(files, path)
		}
		return nil
	})
	return files, err
}

// isFile reports whether the entry d at path is a regular file, or a
// symlink to anything but a directory.
func isFile(path string, d fs.DirEntry) bool {
	return d.Type().IsRegular() || d.Type()&fs.ModeSymlink != 0 && !isDir(path)
}

// isDir reports whether path is a directory, or a symlink to one.
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
	p := newParser(opts)
	for _, f := range files {
		p.file(f)
	}
	return p.config()
}

type parser struct {
	cfg  *Config
	opts LoadOptions
	errs []error
	name string // the file being read
}

// newParser returns a parser of a configuration read under opts.
func newParser(opts LoadOptions) *parser {
	return &parser{cfg: &Config{domains: map[string]*Domain{}}, opts: opts}
}

// config is the configuration read, or every problem found in it.
func (p *parser) config() (*Config, error) {
	if len(p.errs) > 0 {
		return nil, errors.Join(p.errs...)
	}
	return p.cfg, nil
}

func (p *parser) addf(line int, format string, args ...any) {
	at := p.name
	if line > 0 {
		at = fmt.Sprintf("%s:%d", p.name, line)
	}
	p.errs = append(p.errs, fmt.Errorf("%s: %s", at, fmt.Sprintf(format, args...)))
}

// file reads one file, a domain's descriptors, into its Domain.
func (p *parser) file(f Source) {
	p.name = f.Name
	p.cfg.Files = append(p.cfg.Files, f.Name)
	if y, line, ok := p.decode(f.Data); ok {
		p.domainFile(y, line)
	}
}

// domainFile reads a decoded file, its document at line (0: none), into
// its Domain.
func (p *parser) domainFile(y fileYAML, line int) {
	if y.Domain == "" {
		p.addf(line, "config file cannot have empty domain")
		return
	}
	failClosed, ok := p.failureMode(line, y.OnStoreFailure)
	if !ok {
		return
	}
	d := p.domain(line, y, failClosed)
	if d == nil {
		return
	}
	p.descriptors(d, &d.root, nil, y.Descriptors)
}

// decode reads a file's YAML, once its keys are checked; line is its
// document's. It reports whether the file could be read.
func (p *parser) decode(data []byte) (y fileYAML, line int, ok bool) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		p.addf(0, "reading YAML: %v", err)
		return y, 0, false
	}
	if len(doc.Content) == 0 {
		p.addf(0, "config file cannot have empty domain")
		return y, 0, false
	}
	top := doc.Content[0]
	if !p.keys(top) {
		return y, 0, false
	}
	if err := top.Decode(&y); err != nil {
		p.addf(0, "reading YAML: %v", err)
		return y, 0, false
	}
	return y, top.Line, true
}

// failureMode is a file's on_store_failure as a domain's FailClosed: the
// load options' when it is unset. It reports whether the value is known.
func (p *parser) failureMode(line int, v string) (failClosed, ok bool) {
	switch v {
	case "":
		return p.opts.FailClosed, true
	case "fail_open":
		return false, true
	case "fail_closed":
		return true, true
	}
	p.addf(line, "on_store_failure: want fail_open or fail_closed, got %q", v)
	return false, false
}

// domain is the Domain a file configures: a new one or, with
// MergeDomains, the one an earlier file configured, if the file does not
// set another failure mode for it. Nil: the file is refused.
func (p *parser) domain(line int, y fileYAML, failClosed bool) *Domain {
	d, ok := p.cfg.domains[y.Domain]
	switch {
	case !ok:
		d = &Domain{Name: y.Domain, FailClosed: failClosed}
		p.cfg.domains[y.Domain] = d
	case !p.opts.MergeDomains:
		p.addf(line, "duplicate domain '%s' in config file (MERGE_DOMAIN_CONFIG merges them)", y.Domain)
		return nil
	case y.OnStoreFailure != "" && failClosed != d.FailClosed:
		p.addf(line, "domain '%s' is configured with another on_store_failure in another file", y.Domain)
		return nil
	}
	return d
}

// keys checks every mapping key in n against validKeys, as
// envoyproxy/ratelimit does (metadata's contents are free).
func (p *parser) keys(n *yaml.Node) bool {
	switch n.Kind {
	case yaml.MappingNode:
		return p.mappingKeys(n)
	case yaml.SequenceNode:
		return p.sequenceKeys(n)
	}
	return true
}

// mappingKeys checks a mapping's keys, and what each holds.
func (p *parser) mappingKeys(n *yaml.Node) bool {
	ok := true
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
	return ok
}

// sequenceKeys checks that a list holds maps and scalars, and each map's
// keys.
func (p *parser) sequenceKeys(n *yaml.Node) bool {
	ok := true
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
	return ok
}

// descriptors reads the descriptors ds under parent, at path, and
// theirs.
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
		n, ok := p.descriptor(d, full, y)
		if !ok {
			continue
		}
		if strings.Contains(y.Value, "*") {
			parent.wildcards = append(parent.wildcards, n)
		}
		parent.children[ek] = n
		p.descriptors(d, n, full, y.Descriptors)
	}
}

// descriptor is the node of the descriptor y at path, its options and
// its rate limit checked; its children are not read.
func (p *parser) descriptor(d *Domain, path []policy.RLSEntry, y descYAML) (*node, bool) {
	n := &node{entry: entryKey{y.Key, y.Value}, valueToMetric: y.ValueToMetric, shareThreshold: y.ShareThreshold}
	wild := strings.Contains(y.Value, "*")
	if y.ShareThreshold && !wild {
		p.addf(y.line, "share_threshold can only be used with wildcard values (containing '*'), but found key '%s'", statPath(path[len(path)-1:]))
		return nil, false
	}
	if y.QuotaMode {
		p.addf(y.line, "quota_mode is not supported by Tollgate")
		return nil, false
	}
	if y.RateLimit != nil {
		l, ok := p.limit(d, path, y)
		if !ok {
			return nil, false
		}
		n.limit = l
	}
	if wild {
		n.parts = strings.Split(y.Value, "*")
	}
	return n, true
}

// limit is the rate limit of the descriptor y at path.
func (p *parser) limit(d *Domain, path []policy.RLSEntry, y descYAML) (*Limit, bool) {
	r := y.RateLimit
	unit, ok := p.unit(y)
	if !ok {
		return nil, false
	}
	l := &Limit{
		RequestsPerUnit: r.RequestsPerUnit, Unit: unit, Unlimited: r.Unlimited,
		Shadow: y.ShadowMode, Name: r.Name, DetailedMetric: y.DetailedMetric, StatKey: d.Name + "." + statPath(path),
		AfterResponse: r.AfterResponse,
	}
	if l.Replaces, ok = p.replaces(y); !ok {
		return nil, false
	}
	if r.Unlimited {
		if r.AfterResponse {
			p.addf(y.line, "an unlimited descriptor has nothing to charge after the response")
			return nil, false
		}
		return l, true
	}
	l.Period = unitPeriods[l.Unit]
	l.proto = &rlspb.RateLimitResponse_RateLimit{Name: r.Name, RequestsPerUnit: r.RequestsPerUnit, Unit: l.Unit}
	if r.RequestsPerUnit == 0 {
		return l, true
	}
	if l.Budget, ok = p.budget(d, path, y, l); !ok {
		return nil, false
	}
	if l.AfterResponse && !l.Budget.Limit.CanSettle() {
		p.addf(y.line, "after_response charges a response's hits as debt, which %s cannot carry: use fixed_window (the default), gcra, token_bucket or sliding_window_counter", l.Budget.Limit.Algorithm)
		return nil, false
	}
	return l, true
}

// unit is a rate limit's unit, checked against unlimited (a limit has
// one or the other) and its algorithm (an unlimited one takes none).
func (p *parser) unit(y descYAML) (rlspb.RateLimitResponse_RateLimit_Unit, bool) {
	r := y.RateLimit
	unit, known := rlspb.RateLimitResponse_RateLimit_Unit_value[strings.ToUpper(r.Unit)]
	valid := known && unit != int32(rlspb.RateLimitResponse_RateLimit_UNKNOWN)
	switch {
	case r.Unlimited && valid:
		p.addf(y.line, "should not specify rate limit unit when unlimited")
		return 0, false
	case !r.Unlimited && !valid:
		p.addf(y.line, "invalid rate limit unit '%s'", r.Unit)
		return 0, false
	case r.Unlimited && r.Algorithm != "":
		p.addf(y.line, "an unlimited descriptor takes no algorithm")
		return 0, false
	}
	return rlspb.RateLimitResponse_RateLimit_Unit(unit), true
}

// replaces is the names a rate limit replaces, none empty nor its own.
func (p *parser) replaces(y descYAML) ([]string, bool) {
	var names []string
	for _, rep := range y.RateLimit.Replaces {
		switch {
		case rep.Name == "":
			p.addf(y.line, "should not have an empty replaces entry")
			return nil, false
		case rep.Name == y.RateLimit.Name:
			p.addf(y.line, "replaces should not contain name of same descriptor")
			return nil, false
		}
		names = append(names, rep.Name)
	}
	return names, true
}

// budget is what Tollgate counts for the limit l of the descriptor y at
// path: a fixed window of its unit, or the algorithm it names.
func (p *parser) budget(d *Domain, path []policy.RLSEntry, y descYAML, l *Limit) (*policy.Budget, bool) {
	r := y.RateLimit
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
	return b, true
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
