package httplimit

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/tollgate/tollgate/engine"
	"github.com/tollgate/tollgate/llm"
	"github.com/tollgate/tollgate/policy"
)

// A meterWriter passes a token call's response on to the client,
// reading the usage in what reached the client (llm.Meter), never
// holding the body: a stream reaches the client as the upstream sends
// it.
type meterWriter struct {
	http.ResponseWriter
	tokens *policy.Tokens
	meter  *llm.Meter
	status int
	header int64 // the usage header's total, -1 for none
	// whole says the handler returned (a proxy whose upstream or client
	// failed mid-way panics instead); failed, that a write did not reach
	// the client.
	whole, failed bool
}

// meterTokens returns w wrapped to read a token call's usage, and r
// made to ask the upstream for a response it can read (uncompressed).
func meterTokens(w http.ResponseWriter, r *http.Request, t *policy.Tokens) *meterWriter {
	r.Header.Del("Accept-Encoding")
	return &meterWriter{ResponseWriter: w, tokens: t, header: -1}
}

func (w *meterWriter) WriteHeader(code int) {
	if w.status == 0 && code >= 200 {
		w.status = code
		h := w.Header()
		if h.Get("Content-Encoding") == "" || strings.EqualFold(h.Get("Content-Encoding"), "identity") {
			// Each call holds at most its JSON body's usage members, or
			// an event of llm.DefaultMaxEvent: a responses API stream
			// whose response.completed (the whole output) is longer keeps
			// its estimate, rather than every stream in flight holding
			// an answer's worth.
			w.meter = llm.NewMeter(h.Get("Content-Type"), llm.MeterOptions{Paths: w.tokens.UsagePaths})
		}
		if name := w.tokens.UsageHeader; name != "" {
			if n, err := strconv.ParseInt(strings.TrimSpace(h.Get(name)), 10, 64); err == nil {
				w.header = n
			}
		}
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *meterWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	n, err := w.ResponseWriter.Write(p)
	if w.meter != nil {
		w.meter.Write(p[:n]) // what reached the client
	}
	if err != nil {
		w.failed = true
	}
	return n, err
}

// Unwrap returns the writer wrapped, for http.ResponseController
// (flushing a stream event by event).
func (w *meterWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// usage returns what the response reported: its usage header's total;
// else the usage its body reported, if that is the usage a response
// ends with (llm.Usage.Final) and reached the client, or the response
// was passed on whole; else none, and whether it was an error (status
// 400 and above) passed on whole (engine.Usage.Failed). A response cut
// short before its final usage (the client went away, the upstream
// failed) reports nothing, whatever it said so far (an Anthropic
// stream's first event counts one output token): the call keeps its
// estimate.
func (w *meterWriter) usage() engine.Usage {
	whole := w.whole && !w.failed
	if w.header >= 0 && whole {
		return engine.Usage{Output: w.header, Reported: true, TotalOnly: true}
	}
	if w.meter != nil {
		if u, ok := w.meter.Usage(); ok && (u.Final || whole) {
			if u.TotalOnly {
				return engine.Usage{Output: u.Total, Reported: true, TotalOnly: true, Impossible: u.Malformed}
			}
			return engine.Usage{Input: u.Input, Output: u.Output, Reported: true, Impossible: u.Malformed}
		}
	}
	return engine.Usage{Failed: w.status >= 400 && whole}
}

// setTokenHeaders writes the x-ratelimit-*-requests and -tokens headers
// LLM clients read (as OpenAI sends them: the limit, what remains, and
// the time until it is whole again) for the most restrictive request
// budget and token budget of v.
func setTokenHeaders(h http.Header, v *engine.Verdict) {
	for _, k := range []struct {
		tokens bool
		suffix string
	}{{false, "-requests"}, {true, "-tokens"}} {
		c, ok := v.ReportedOf(k.tokens)
		if !ok {
			continue
		}
		d := c.Decision
		reset := d.ResetAfter
		if !d.Allowed {
			reset = d.RetryAfter
		}
		h.Set("X-Ratelimit-Limit"+k.suffix, strconv.FormatInt(c.Budget.Limit.Rate, 10))
		h.Set("X-Ratelimit-Remaining"+k.suffix, strconv.FormatInt(d.Remaining, 10))
		h.Set("X-Ratelimit-Reset"+k.suffix, reset.Round(time.Millisecond).String())
	}
}
