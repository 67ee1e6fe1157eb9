package httplimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/httplimit"
	"github.com/tollgate/tollgate/store/memory"
)

// The middleware without a policy file: 2 requests per minute for each
// account named by a header, else for each client address.
func ExampleMiddleware_withoutPolicy() {
	store := memory.New(memory.Options{})
	defer store.Close()
	limit, err := httplimit.Middleware(httplimit.Options{
		Store: store,
		Limit: tollgate.PerMinute(2),
		Subject: func(r *http.Request) (string, bool) {
			id := r.Header.Get("X-Account")
			return id, id != ""
		},
	})
	if err != nil {
		panic(err)
	}
	h := limit(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "hello") }))
	for range 3 {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("X-Account", "acme")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Println(w.Code, w.Header().Get("Retry-After") != "")
	}
	// Output:
	// 200 false
	// 200 false
	// 429 true
}
