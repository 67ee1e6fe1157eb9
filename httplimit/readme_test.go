package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/tollgate/tollgate/httplimit"
	"github.com/tollgate/tollgate/policy"
	"github.com/tollgate/tollgate/store/memory"
)

// TestReadmeMiddleware runs the middleware snippet of
// docs/integrations/go-library.md as written, on examples/middleware.yaml:
// a policy without listeners or upstreams.
func TestReadmeMiddleware(t *testing.T) {
	store := memory.New(memory.Options{})
	defer store.Close()
	pol, err := policy.Load("../examples/middleware.yaml")
	if err != nil {
		t.Fatal(err)
	}
	mw, err := httplimit.Middleware(httplimit.Options{Policy: pol, Store: store})
	if err != nil {
		t.Fatal(err)
	}
	served := 0
	appHandler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { served++ })
	h := mw(appHandler)
	for i := range 11 {
		r := httptest.NewRequest("GET", "/export", nil)
		r.RemoteAddr = "192.0.2.7:1234"
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if want := map[bool]int{true: 200, false: 429}[i < 10]; w.Code != want {
			t.Fatalf("export %d: %d, want %d (free: 100/min at cost 10)", i, w.Code, want)
		}
	}
	if served != 10 {
		t.Fatalf("the handler ran %d times, want 10", served)
	}
}
