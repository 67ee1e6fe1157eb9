package policy_test

import (
	"strings"
	"testing"

	"github.com/tollgate/tollgate/policy"
)

func TestParseByteSize(t *testing.T) {
	for in, want := range map[string]policy.ByteSize{
		"0": 0, "4096": 4096, "512KiB": 512 << 10, "256MiB": 256 << 20, "256 MiB": 256 << 20, "1GiB": 1 << 30,
		"1gib": 1 << 30, "2Gi": 2 << 30, "1.5GiB": 3 << 29, "1TiB": 1 << 40, "10MB": 10_000_000, "3k": 3000, "7B": 7,
	} {
		if got, err := policy.ParseByteSize(in); err != nil || got != want {
			t.Errorf("ParseByteSize(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "MiB", "-1", "-1MiB", "12XB", "1e3", "1..2MiB", "99999999999TiB"} {
		if got, err := policy.ParseByteSize(in); err == nil {
			t.Errorf("ParseByteSize(%q) = %v, want an error", in, got)
		}
	}
	for _, b := range []policy.ByteSize{256 << 20, 1 << 30, 1536 << 20, 1000, 0} {
		if got, err := policy.ParseByteSize(b.String()); err != nil || got != b {
			t.Errorf("%d: String() = %q, which parses as %v, %v", int64(b), b.String(), got, err)
		}
	}
}

// TestStoreBounds checks store.max_bytes, with units, and store.max_keys.
func TestStoreBounds(t *testing.T) {
	p, err := policy.Parse([]byte(strings.Replace(valid, "identity:", "store: {max_bytes: 64MiB, max_keys: 100000}\nidentity:", 1)), "p.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if p.Store.MaxBytes != 64<<20 || p.Store.MaxKeys != 100_000 {
		t.Errorf("store = %+v, want 64MiB and 100,000 keys", p.Store)
	}
	p, err = policy.Parse([]byte(valid), "p.yaml")
	if err != nil || p.Store.MaxBytes != 0 {
		t.Fatalf("without max_bytes: %+v, %v; want 0 (the store's default)", p, err)
	}
	for _, c := range []struct{ store, want string }{
		{"{max_bytes: 12XB}", `p.yaml:3: invalid size "12XB"`},
		{"{max_bytes: [1]}", "p.yaml:3: want a size"},
		{"{max_bytes: 4096}", "store.max_bytes: want at least 1MiB"},
		{"{max_keys: -1}", "store.max_keys"},
	} {
		_, err := policy.Parse([]byte(strings.Replace(valid, "identity:", "store: "+c.store+"\nidentity:", 1)), "p.yaml")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("store: %s: %v; want an error with %q", c.store, err, c.want)
		}
	}
}
