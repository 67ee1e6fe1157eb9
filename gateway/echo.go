package gateway

import (
	"encoding/json"
	"io"
	"net/http"
	"sort"
	"strings"
)

// Echo is the built-in demo upstream (builtin:echo). It answers every
// request with a JSON description of it, and POST /login with 200 when the
// JSON body's password is "demo" and 401 otherwise.
func Echo() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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
