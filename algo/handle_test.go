package algo_test

import (
	"errors"
	"testing"
	"time"

	"github.com/tollgate/tollgate/algo"
)

// TestHandle: a handle validates its limit once, and a request taken from
// it carries it only while its Policy and Limit are the handle's.
func TestHandle(t *testing.T) {
	if _, err := algo.NewHandle("p", algo.Limit{Rate: 0, Period: time.Second}); !errors.Is(err, algo.ErrInvalidLimit) {
		t.Fatalf("invalid limit: %v", err)
	}
	l := algo.Limit{Rate: 10, Period: time.Second}
	h, err := algo.NewHandle("p", l)
	if err != nil {
		t.Fatal(err)
	}
	r := h.Request("s", 2)
	if r.Name != "p" || r.Subject != "s" || r.Cost != 2 || r.Limit != l || r.Prepared() != h {
		t.Fatalf("request %+v", r)
	}
	changed := r
	changed.Limit.Rate = 5
	if changed.Prepared() != nil {
		t.Error("a request whose limit changed still uses the handle")
	}
	renamed := r
	renamed.Name = "q"
	if renamed.Prepared() != nil {
		t.Error("a request whose policy changed still uses the handle")
	}
	if got := string(h.KeyPrefix()); got != string(algo.AppendKeyPrefix(nil, l.Algorithm, "p")) {
		t.Errorf("key prefix %q", got)
	}
}
