package gateway

import (
	"encoding/json"
	"io"
	"net/http"
	"sort"
	"strings"
	"time"
)

// Echo is the built-in demo upstream (builtin:echo). It answers every
// request with a JSON description of it, and POST /login with 200 when the
// JSON body's password is "demo" and 401 otherwise. A ?sleep=D query
// (at most 10s) makes it answer slowly, to try concurrency limits.
func Echo() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if d, err := time.ParseDuration(r.URL.Query().Get("sleep")); err == nil && d > 0 {
			t := time.NewTimer(min(d, 10*time.Second))
			select {
			case <-t.C:
			case <-r.Context().Done():
				t.Stop()
				return
			}
		}
		w.Header().Set("Content-Type", "application/json")
		if r.Method == http.MethodPost && r.URL.Path == "/login" {
			var body struct {
				Username string `json:"username"`
				Password string `json:"password"`
			}
			json.NewDecoder(io.LimitReader(r.Body, 64<<10)).Decode(&body)
			if body.Password != "demo" {
				w.WriteHeader(http.StatusUnauthorized)
				w.Write([]byte(`{"ok":false,"error":"wrong username or password"}` + "\n"))
				return
			}
			w.Write([]byte(`{"ok":true}` + "\n"))
			return
		}
		headers := map[string]string{}
		for k, v := range r.Header {
			switch k {
			case "Authorization", "X-Api-Key", "Cookie":
				continue // never echo credentials
			}
			headers[k] = strings.Join(v, ", ")
		}
		keys := make([]string, 0, len(headers))
		for k := range headers {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		json.NewEncoder(w).Encode(map[string]any{
			"method":  r.Method,
			"path":    r.URL.Path,
			"query":   r.URL.RawQuery,
			"headers": headers,
		})
	})
}
