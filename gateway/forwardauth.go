package gateway

import (
	"net/http"
	"strings"

	"github.com/tollgate/tollgate/httplimit"
	"github.com/tollgate/tollgate/policy"
)

// The forward-auth endpoints on the public listener, under a prefix no
// route may claim (policy.ReservedPrefix): ForwardAuthPath answers with
// the gateway's own statuses (Caddy forward_auth, Traefik ForwardAuth),
// NginxAuthPath answers every refusal 403 with the status meant in
// X-Tollgate-Status (nginx auth_request passes only 2xx, 401 and 403).
const (
	ForwardAuthPath = policy.ReservedPrefix + "auth"
	NginxAuthPath   = policy.ReservedPrefix + "auth/nginx"
)

// withForwardAuth serves the forward-auth endpoints of front beside next,
// and answers 404 for anything else under the reserved prefix, however
// spelt, so that no route (a catch-all included) proxies it.
func withForwardAuth(front *httplimit.Front, next http.Handler) http.Handler {
	auth := front.ForwardAuth(httplimit.ForwardAuthOptions{})
	nginx := front.ForwardAuth(httplimit.ForwardAuthOptions{RefusalStatus: http.StatusForbidden})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case ForwardAuthPath:
			auth.ServeHTTP(w, r)
			return
		case NginxAuthPath:
			nginx.ServeHTTP(w, r)
			return
		}
		if k := policy.MatchKey(policy.CleanPath(r.URL.Path)); strings.HasPrefix(k+"/", policy.ReservedPrefix) {
			httplimit.WriteProblem(w, httplimit.Problem{Type: httplimit.ProblemNotFound, Status: http.StatusNotFound,
				Detail: "paths under " + policy.ReservedPrefix + " are Tollgate's own"})
			return
		}
		next.ServeHTTP(w, r)
	})
}
