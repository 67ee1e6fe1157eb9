package policy

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/tollgate/tollgate/llm"
)

// Unit is what a budget counts.
type Unit uint8

// The units.
const (
	UnitRequests     Unit = iota // requests, each at its route's cost
	UnitTokens                   // the tokens a call used, input and output
	UnitInputTokens              // the input (prompt) tokens
	UnitOutputTokens             // the output (completion) tokens
)

var unitNames = [...]string{"requests", "tokens", "input_tokens", "output_tokens"}

func (u Unit) String() string { return unitNames[u] }

// parseUnit returns the unit named s ("" for requests).
func parseUnit(s string) (Unit, bool) {
	if s == "" {
		return UnitRequests, true
	}
	for i, n := range unitNames {
		if n == s {
			return Unit(i), true
		}
	}
	return 0, false
}

// Tokens is how a token route's calls are estimated and settled
// (TokensSpec compiled, defaults filled in).
type Tokens struct {
	// Fields are the request's JSON fields bounding its output, the first
	// present winning.
	Fields []string
	// DefaultOutput and MaxOutput are the output estimate without a bound
	// and the most it is.
	DefaultOutput, MaxOutput int64
	// BytesPerInput divides the body's bytes into the input estimate; 0
	// leaves the input out.
	BytesPerInput int64
	// MaxUsage is the most tokens a response may report in each count.
	MaxUsage int64
	// UsageHeader names the response header giving the total used ("" for
	// none).
	UsageHeader string
	// UsagePaths is where the responses report their usage (nil: the
	// OpenAI and Anthropic shapes).
	UsagePaths *llm.Paths
	// SettleTTL is how long after a call's reservation it can be settled:
	// the upstream's timeout and a margin. A call still unsettled then
	// keeps its estimate.
	SettleTTL time.Duration
}

// Estimate returns the input and output a call is estimated to use: the
// output its request bounds each answer to (maxOutput, negative when it
// names none: DefaultOutput), at most MaxOutput, times the answers it
// asks for (choices, at least 1; saturated, never wrapping round), and
// the input from its body's size in bytes.
func (t *Tokens) Estimate(maxOutput, choices, bodyBytes int64) (input, output int64) {
	output = t.DefaultOutput
	if maxOutput >= 0 {
		output = min(maxOutput, t.MaxOutput)
	}
	if choices = max(1, choices); output > 0 && choices > math.MaxInt64/output {
		output = math.MaxInt64 // more than any budget: refused as too costly
	} else {
		output *= choices
	}
	if t.BytesPerInput > 0 {
		input = (bodyBytes + t.BytesPerInput - 1) / t.BytesPerInput
	}
	return input, output
}

// Usage returns count, at least 0, as a response reported it, capped: a
// count above MaxUsage is MaxUsage, and capped says so.
func (t *Tokens) Usage(count int64) (n int64, capped bool) {
	if count > t.MaxUsage {
		return t.MaxUsage, true
	}
	return count, false
}

// Of returns what a call estimated (or reported) to use input and output
// tokens costs a budget of unit u; 0 for requests, which the route's
// cost charges.
func (u Unit) Of(input, output int64) int64 {
	switch u {
	case UnitTokens:
		return input + output
	case UnitInputTokens:
		return input
	case UnitOutputTokens:
		return output
	}
	return 0
}

// DefaultMaxTokensFields are the request fields read for a call's output
// bound when a route names none.
var DefaultMaxTokensFields = []string{"max_completion_tokens", "max_tokens", "max_output_tokens"}

// The defaults and bounds of TokensSpec.
const (
	DefaultOutputTokens       = 4096
	DefaultMaxOutputTokens    = 32768
	DefaultBytesPerInputToken = 4
	DefaultMaxUsage           = 2_000_000
	maxBytesPerInputToken     = 64
	maxModelName              = 256
)

// tokens compiles a route's tokens.
func (c *compiler) tokens(path string, s *TokensSpec, upstream time.Duration) *Tokens {
	t := &Tokens{Fields: s.MaxTokensFields, DefaultOutput: orDefault(s.DefaultOutput, DefaultOutputTokens),
		MaxOutput: orDefault(s.MaxOutput, DefaultMaxOutputTokens), BytesPerInput: s.BytesPerInputToken,
		MaxUsage: orDefault(s.MaxUsage, DefaultMaxUsage), UsageHeader: s.UsageHeader,
		SettleTTL: orDefault(upstream, 30*time.Second) + 30*time.Second}
	if t.Fields == nil {
		t.Fields = DefaultMaxTokensFields
	}
	if !c.written(path + ".bytes_per_input_token") {
		t.BytesPerInput = DefaultBytesPerInputToken
	}
	seen := map[string]bool{}
	for i, f := range t.Fields {
		c.rejectIf(f == "" || len(f) > 64 || seen[f] || f == "model" || f == "stream" || f == "n", fmt.Sprintf("%s.max_tokens_fields[%d]", path, i),
			"field names are 1 to 64 bytes, each once, and not model, stream or n (got %q)", f)
		seen[f] = true
	}
	c.rejectIf(len(t.Fields) == 0, path+".max_tokens_fields", "name at least one field, or leave max_tokens_fields out for the default")
	c.rejectIf(t.MaxOutput < 1, path+".max_output", "at least 1, got %d", t.MaxOutput)
	c.rejectIf(t.DefaultOutput < 1 || t.DefaultOutput > t.MaxOutput, path+".default_output", "1 to max_output (%d), got %d", t.MaxOutput, t.DefaultOutput)
	c.rejectIf(t.BytesPerInput < 0 || t.BytesPerInput > maxBytesPerInputToken, path+".bytes_per_input_token", "0 to %d, got %d", maxBytesPerInputToken, t.BytesPerInput)
	c.rejectIf(t.MaxUsage < 1, path+".max_usage", "at least 1, got %d", t.MaxUsage)
	c.rejectIf(t.UsageHeader != "" && !headerPattern.MatchString(t.UsageHeader), path+".usage_header", "not a header name: %q", t.UsageHeader)
	t.UsagePaths = c.usagePaths(path+".usage_paths", s.UsagePaths)
	c.rejectIf(t.SettleTTL > 24*time.Hour, path, "upstream.timeout + 30s is longer than a day, the longest a call can take to settle")
	return t
}

// The bounds of a usage path.
const (
	maxPathKeys   = 8
	maxPathKeyLen = 64
)

// usagePaths compiles a route's usage_paths.
func (c *compiler) usagePaths(path string, s *UsagePathsSpec) *llm.Paths {
	if s == nil {
		return nil
	}
	split := func(name, v string) []string {
		if v == "" {
			return nil
		}
		keys := strings.Split(v, ".")
		bad := len(keys) > maxPathKeys || slices.ContainsFunc(keys, func(k string) bool { return k == "" || len(k) > maxPathKeyLen })
		c.rejectIf(bad, path+"."+name, "a path is 1 to %d keys of 1 to %d bytes joined by \".\" (got %q)", maxPathKeys, maxPathKeyLen, v)
		return keys
	}
	p := &llm.Paths{Input: split("input", s.Input), Output: split("output", s.Output), Total: split("total", s.Total)}
	if err := p.Check(); err != nil {
		c.addf(path, "%v", err)
	}
	return p
}

// budgetUnit compiles a plan limit's unit, models and per_model onto b.
func (c *compiler) budgetUnit(path string, b *Budget, s UnitSpec) {
	u, ok := parseUnit(s.Unit)
	if !ok {
		c.addf(path+".unit", "want requests, tokens, input_tokens or output_tokens, got %q", s.Unit)
	}
	b.Unit = u
	if u != UnitRequests && !b.Limit.CanSettle() {
		c.addf(path+".algorithm", "a token limit is settled after the response, which %s cannot do: use gcra, token_bucket, fixed_window, sliding_counter or a calendar quota", b.Limit.Algorithm)
	}
	if len(s.Models) > 0 {
		b.Models = make(map[string]bool, len(s.Models))
	}
	for i, m := range s.Models {
		c.rejectIf(m == "" || len(m) > maxModelName || b.Models[m], fmt.Sprintf("%s.models[%d]", path, i), "model names are 1 to %d bytes, each once (got %q)", maxModelName, m)
		b.Models[m] = true
	}
	b.PerModel = s.PerModel
	c.rejectIf(s.PerModel && len(s.Models) == 0, path+".per_model", "per_model counts each of models apart: list them under models")
	if u != UnitRequests || b.Models != nil || b.PerModel {
		b.setLimit(b.Limit) // its unit and models name its state
	}
}

// zero reports whether s is unset: a limit of requests, for every call.
func (s *UnitSpec) zero() bool { return s.Unit == "" && len(s.Models) == 0 && !s.PerModel }

// Applies reports whether the budget applies to a call: a plain budget
// to every call, a token budget or one naming models to calls on a token
// route (tokens) for one of its models (model).
func (b *Budget) Applies(tokens bool, model string) bool {
	if b.Unit == UnitRequests && b.Models == nil {
		return true
	}
	return tokens && (b.Models == nil || b.Models[model])
}
