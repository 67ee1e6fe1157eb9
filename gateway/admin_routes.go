package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"reflect"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tollgate/tollgate/httplimit"
	"github.com/tollgate/tollgate/policy"
)

// AdminHandler returns the admin handler: an index at /, /healthz,
// /readyz, /metrics, the policy and override endpoints and the
// dashboard, behind the checks of guardAdmin (Host without a token, the
// token, and for state-changing requests same-origin and Content-Type:
// application/json).
func (g *Gateway) AdminHandler() http.Handler { return g.admin }

func (g *Gateway) adminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", adminIndex)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", g.readyz)
	mux.HandleFunc("GET /dashboard", g.dashboardPage)
	mux.HandleFunc("GET /dashboard/data", g.dashboardData)
	mux.HandleFunc("GET /dashboard/history", g.dashboardHistory)
	mux.HandleFunc("GET /recording", g.recordingExport)
	mux.HandleFunc("POST /simulate", g.simulateCandidate)
	mux.HandleFunc("GET /policy", g.policyState)
	mux.HandleFunc("GET /overrides", g.overridesState)
	mux.HandleFunc("PUT /keys/{id}", g.putKey)
	mux.HandleFunc("DELETE /keys/{id}", g.deleteKey)
	mux.HandleFunc("PUT /tenants/{tenant}", g.putTenant)
	mux.HandleFunc("DELETE /tenants/{tenant}", g.deleteTenant)
	mux.HandleFunc("POST /budgets/reset", g.resetBudgets)
	mux.HandleFunc("POST /policy/rollback", g.rollbackPolicy)
	mux.Handle("GET /metrics", promhttp.HandlerFor(g.registry, promhttp.HandlerOpts{}))
	return guardAdmin(mux, g.pol.AdminToken)
}

// adminIndexPage is the admin listener's index: links to its pages.
const adminIndexPage = `<!doctype html>
<html lang="en">
<head><meta charset="utf-8"><title>Tollgate admin</title></head>
<body>
<h1>Tollgate admin</h1>
<ul>
<li><a href="/dashboard">/dashboard</a>: traffic, refusals and policy replays</li>
<li><a href="/metrics">/metrics</a>: Prometheus metrics</li>
<li><a href="/policy">/policy</a>: the active policy's version, and those a rollback goes to</li>
<li><a href="/healthz">/healthz</a>: liveness</li>
<li><a href="/readyz">/readyz</a>: readiness, and the store's and the JWKS's state</li>
</ul>
</body>
</html>
`

// adminIndex answers the admin listener's root with links to its pages
// (behind the admin checks, as every page is).
func adminIndex(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Security-Policy", "default-src 'none'; "+noFraming)
	io.WriteString(w, adminIndexPage)
}

// readyz answers the readiness probe: ready, or degraded while the store
// is unavailable (the gateway still serves, by each route's failure
// policy) or the active policy's JWKS cannot be fetched.
func (g *Gateway) readyz(w http.ResponseWriter, r *http.Request) {
	// A gateway whose store is down still serves, by each route's
	// failure policy: it is ready, but says it is degraded. So is one
	// whose JWKS cannot be fetched: it still serves API keys, anonymous
	// calls and the tokens the keys it has check (the others get 503).
	// Another instance would fetch the same JWKS no better, so taking
	// this one out of rotation (a 503 here) would help no one.
	status, detail := "ready", "store ok"
	ctx, cancel := context.WithTimeout(r.Context(), time.Second)
	defer cancel()
	if err := g.store.Ping(ctx); err != nil {
		status, detail = "degraded", "store unavailable: "+err.Error()
	}
	if d, ok := g.store.(interface{ Degraded() bool }); ok && d.Degraded() && status == "ready" {
		status, detail = "degraded", "store circuit breaker not closed"
	}
	if j := g.Policy().JWT; j != nil && j.JWKSURL != "" {
		if err := g.keys.FetchError(j.JWKSURL); err != nil {
			status, detail = "degraded", detail+"; jwks unavailable: "+err.Error()
		}
	}
	w.Header().Set("Content-Type", "application/json")
	if r.Context().Value(probeOnly{}) != nil {
		json.NewEncoder(w).Encode(map[string]string{"status": status})
		return
	}
	json.NewEncoder(w).Encode(map[string]string{"status": status, "detail": detail, "policy_version": g.Policy().Version})
}

// policyState answers the active policy's version, hash and source, and
// the versions a rollback goes to, newest first.
func (g *Gateway) policyState(w http.ResponseWriter, r *http.Request) {
	a := g.active.Load()
	out := map[string]any{"version": a.pol.Version, "hash": a.pol.Hash, "source": a.pol.Source, "loaded_at": a.loaded.UTC()}
	g.mu.Lock()
	history := make([]map[string]any, len(g.history))
	for i, h := range g.history {
		// Newest first: the order rollbacks take them.
		history[len(history)-1-i] = map[string]any{"version": h.pol.Version, "hash": h.pol.Hash}
	}
	g.mu.Unlock()
	out["history"] = history
	if len(history) > 0 {
		out["previous"] = history[0] // where a rollback goes
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(out)
}

// override applies change and answers: 204, or the problem.
func (g *Gateway) override(w http.ResponseWriter, change policy.Overrides) {
	if err := g.Override(change); err != nil {
		status := http.StatusUnprocessableEntity
		switch {
		case errors.Is(err, errStateMoved):
			status = http.StatusConflict
		case errors.Is(err, errNotSaved):
			status = http.StatusServiceUnavailable
		}
		httplimit.WriteProblem(w, httplimit.Problem{Type: "urn:tollgate:problem:bad-override", Status: status, Detail: err.Error()})
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// overridesState answers the overrides in force.
func (g *Gateway) overridesState(w http.ResponseWriter, r *http.Request) {
	g.mu.Lock()
	out := g.overrides
	g.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(out)
}

// putKey adds or replaces an API key by override.
func (g *Gateway) putKey(w http.ResponseWriter, r *http.Request) {
	var k policy.KeySpec
	if err := decodeStrict(w, r, &k); err != nil || k.ID != "" && k.ID != r.PathValue("id") {
		httplimit.WriteProblem(w, httplimit.Problem{Type: "urn:tollgate:problem:bad-override", Status: http.StatusBadRequest,
			Detail: "want one JSON object with digest, plan and optionally tenant and user (and id, if given, the one in the path)"})
		return
	}
	k.ID = ""
	g.override(w, policy.Overrides{Keys: map[string]*policy.KeySpec{r.PathValue("id"): &k}})
}

// deleteKey removes an API key by override.
func (g *Gateway) deleteKey(w http.ResponseWriter, r *http.Request) {
	g.override(w, policy.Overrides{Keys: map[string]*policy.KeySpec{r.PathValue("id"): nil}})
}

// putTenant sets a tenant's plan by override.
func (g *Gateway) putTenant(w http.ResponseWriter, r *http.Request) {
	var t struct {
		Plan string `json:"plan"`
	}
	if err := decodeStrict(w, r, &t); err != nil || t.Plan == "" {
		httplimit.WriteProblem(w, httplimit.Problem{Type: "urn:tollgate:problem:bad-override", Status: http.StatusBadRequest, Detail: `want {"plan": "<name>"}`})
		return
	}
	g.override(w, policy.Overrides{Tenants: map[string]string{r.PathValue("tenant"): t.Plan}})
}

// deleteTenant removes a tenant's plan override.
func (g *Gateway) deleteTenant(w http.ResponseWriter, r *http.Request) {
	g.override(w, policy.Overrides{Tenants: map[string]string{r.PathValue("tenant"): ""}})
}

// resetBudgets resets every budget of an API key's subject, or of a
// subject (a pseudonym) and its tenant.
func (g *Gateway) resetBudgets(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Key     string `json:"key"`
		Subject string `json:"subject"`
		Tenant  string `json:"tenant"`
	}
	if err := decodeStrict(w, r, &req); err != nil || (req.Key == "") == (req.Subject == "") || req.Key != "" && req.Tenant != "" {
		httplimit.WriteProblem(w, httplimit.Problem{Type: "urn:tollgate:problem:bad-reset", Status: http.StatusBadRequest,
			Detail: `want {"key": "<API key id>"} or {"subject": "<pseudonym>", "tenant": "<tenant, if any>"}`})
		return
	}
	front := g.active.Load().front
	subject, n, err := req.Subject, 0, error(nil)
	if req.Key != "" {
		subject, n, err = front.ResetKey(r.Context(), req.Key)
	} else {
		n, err = front.ResetSubject(r.Context(), req.Subject, req.Tenant)
	}
	if err != nil {
		status := http.StatusServiceUnavailable
		if subject == "" {
			status = http.StatusNotFound
		}
		httplimit.WriteProblem(w, httplimit.Problem{Type: "urn:tollgate:problem:bad-reset", Status: status, Detail: err.Error()})
		return
	}
	g.log.Info("budgets reset", slog.String("subject", subject), slog.Int("budgets", n))
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{"subject": subject, "budgets": n})
}

// rollbackPolicy goes back to the previous policy.
func (g *Gateway) rollbackPolicy(w http.ResponseWriter, r *http.Request) {
	if err := g.Rollback(); err != nil {
		httplimit.WriteProblem(w, httplimit.Problem{Type: "urn:tollgate:problem:no-previous-policy", Status: http.StatusConflict, Detail: err.Error()})
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]string{"version": g.Policy().Version, "hash": g.Policy().Hash})
}

// decodeStrict decodes the body of r, at most 64 KiB, into v, a pointer
// to a struct: one JSON object whose every field is one of v's, spelt
// exactly as its json tag (the names the admin API writes, as GET
// /overrides shows them), each at most once (JSON readers differ on which
// of two counts: a proxy's or an audit log's must not read another value
// than this one), and nothing after it.
func decodeStrict(w http.ResponseWriter, r *http.Request, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return errors.New("want a JSON object")
	}
	fields, err := objectFields(dec, jsonNames(reflect.TypeOf(v).Elem()))
	if err != nil {
		return err
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("data after the JSON object")
	}
	b, _ := json.Marshal(fields)
	return json.Unmarshal(b, v)
}

// jsonNames returns the names of the fields of struct type t, as their
// json tags spell them.
func jsonNames(t reflect.Type) map[string]bool {
	names := map[string]bool{}
	for i := 0; i < t.NumField(); i++ {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		names[name] = true
	}
	return names
}

// objectFields reads the members of the JSON object dec has just opened,
// up to (not including) its closing brace, and returns their values by
// name: each must be one of known, given once.
func objectFields(dec *json.Decoder, known map[string]bool) (map[string]json.RawMessage, error) {
	fields := map[string]json.RawMessage{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		name, _ := tok.(string)
		if !known[name] {
			return nil, fmt.Errorf("unknown field %q", name)
		}
		if _, dup := fields[name]; dup {
			return nil, fmt.Errorf("field %q given twice", name)
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, err
		}
		fields[name] = raw
	}
	return fields, nil
}
