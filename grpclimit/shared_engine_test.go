package grpclimit_test

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tollgate/tollgate/engine"
	"github.com/tollgate/tollgate/grpclimit"
	"github.com/tollgate/tollgate/httplimit"
)

// TestOneEngineTwoFronts: the HTTP middleware and the gRPC interceptor
// handed one engine decide under one set of budgets: the free plan's 3 a
// minute, spent over HTTP from an address, leave none for its gRPC calls.
func TestOneEngineTwoFronts(t *testing.T) {
	e, err := engine.New(engine.Options{Policy: testPolicy(t, ""), Store: stores()[0].new(t), Now: fixed, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	mw, err := httplimit.Middleware(httplimit.Options{Engine: e})
	if err != nil {
		t.Fatal(err)
	}
	h := mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for i, want := range []int{200, 200, 200, 429} {
		req := httptest.NewRequest("POST", "/test.Echo/Say", nil)
		req.RemoteAddr = "127.0.0.1:1234" // the gRPC client's address
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != want {
			t.Fatalf("HTTP call %d: %d, want %d", i, rec.Code, want)
		}
	}
	_, cc := start(t, grpclimit.Options{Engine: e})
	if r := call(cc, "Say"); status.Code(r.err) != codes.ResourceExhausted {
		t.Fatalf("a gRPC call from the address that spent its budget over HTTP: %v, want ResourceExhausted", r.err)
	}
}
