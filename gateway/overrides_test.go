package gateway_test

import (
	"net/http"
	"strings"
	"testing"
)

func adminDo(t *testing.T, method, url, body string) int {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestRuntimeOverrides changes API keys and a tenant's plan through the
// admin API, without a restart; the changes survive a reload of the file,
// and one that does not fit the policy is refused and changes nothing.
func TestRuntimeOverrides(t *testing.T) {
	up := newUpstream(t)
	p := config(t, up.URL, "[]")
	g := start(t, p, "")
	plan := func(key string) string {
		resp := get(t, g.public+"/api/items", "X-API-Key", key)
		if resp.StatusCode != 200 {
			return resp.Status
		}
		return strings.SplitN(resp.Header.Get("RateLimit-Policy"), ";", 2)[0]
	}
	if got := plan(freeKey); got != `"free.minute"` {
		t.Fatalf("before: %s", got)
	}
	// Tenant demo (the free key's) moves to pro.
	if code := adminDo(t, "PUT", g.admin+"/tenants/demo", `{"plan":"pro"}`); code != 204 {
		t.Fatalf("PUT tenant: %d", code)
	}
	if got := plan(freeKey); got != `"pro"` {
		t.Fatalf("after the tenant override: %s", got)
	}
	// A new key, added at runtime.
	const digest = "sha256:c232a2ef101127466f5296e1fd375b61c363b57a4f329d62d4780b04f343812b" // u1-key
	if got := plan("u1-key"); !strings.HasPrefix(got, "401") {
		t.Fatalf("unknown key: %s", got)
	}
	if code := adminDo(t, "PUT", g.admin+"/keys/u1", `{"digest":"`+digest+`","tenant":"t9","plan":"free"}`); code != 204 {
		t.Fatalf("PUT key: %d", code)
	}
	if got := plan("u1-key"); got != `"free.minute"` {
		t.Fatalf("the added key: %s", got)
	}
	// Overrides survive a reload of the file.
	if err := g.g.Reload(p); err != nil {
		t.Fatal(err)
	}
	if plan("u1-key") != `"free.minute"` || plan(freeKey) != `"pro"` {
		t.Fatal("overrides lost in a reload")
	}
	// A bad override is refused whole.
	if code := adminDo(t, "PUT", g.admin+"/tenants/demo", `{"plan":"platinum"}`); code != 422 {
		t.Fatalf("unknown plan: %d", code)
	}
	if code := adminDo(t, "PUT", g.admin+"/keys/u2", `{"digest":"not-a-digest","plan":"free"}`); code != 422 {
		t.Fatalf("bad digest: %d", code)
	}
	if plan(freeKey) != `"pro"` {
		t.Fatal("a refused override changed the policy")
	}
	// Removing them restores the file's keys and plans.
	adminDo(t, "DELETE", g.admin+"/keys/u1", "")
	adminDo(t, "DELETE", g.admin+"/tenants/demo", "")
	if got := plan("u1-key"); !strings.HasPrefix(got, "401") {
		t.Fatalf("removed key: %s", got)
	}
	if got := plan(freeKey); got != `"free.minute"` {
		t.Fatalf("removed tenant override: %s", got)
	}
	// No per-tenant metric series appeared.
	_, metrics := getBody(t, g.admin+"/metrics")
	if strings.Contains(string(metrics), "demo") || strings.Contains(string(metrics), "t9") {
		t.Fatal("a tenant name reached the metrics")
	}
}

// TestOverridesJSONStrict: the admin API reads exactly the field names it
// writes: an unknown or differently spelt field, a second value or
// trailing data is refused and changes nothing; GET /overrides gives back
// what PUT took, in the same names.
func TestOverridesJSONStrict(t *testing.T) {
	up := newUpstream(t)
	g := start(t, config(t, up.URL, "[]"), "")
	const digest = "sha256:c232a2ef101127466f5296e1fd375b61c363b57a4f329d62d4780b04f343812b"
	for _, body := range []string{
		`{"digest":"` + digest + `","plan":"free","planx":"pro"}`,
		`{"Digest":"` + digest + `","plan":"free"}`,
		`{"digest":"` + digest + `","plan":"free"} {"plan":"pro"}`,
		`{"digest":"` + digest + `","plan":"free"}x`,
		`{"id":"other","digest":"` + digest + `","plan":"free"}`,
		`["digest"]`,
		// A field twice: which one counts differs between JSON readers
		// (a proxy or an audit log may read the first, Go the last).
		`{"digest":"` + digest + `","plan":"free","plan":"pro"}`,
	} {
		if code := adminDo(t, "PUT", g.admin+"/keys/u1", body); code != 400 {
			t.Errorf("PUT %s: %d, want 400", body, code)
		}
	}
	for _, body := range []string{`{"Plan":"pro"}`, `{"plan":"free","plan":"pro"}`} {
		if code := adminDo(t, "PUT", g.admin+"/tenants/demo", body); code != 400 {
			t.Errorf("PUT tenant %s: %d, want 400", body, code)
		}
	}
	_, body := getBody(t, g.admin+"/overrides")
	if strings.Contains(string(body), "u1") || strings.Contains(string(body), "demo") {
		t.Fatalf("refused changes were applied: %s", body)
	}
	put := `{"digest":"` + digest + `","tenant":"t9","plan":"free"}`
	if code := adminDo(t, "PUT", g.admin+"/keys/u1", put); code != 204 {
		t.Fatalf("PUT key: %d", code)
	}
	_, body = getBody(t, g.admin+"/overrides")
	if want := `{"keys":{"u1":` + put + `},"tenants":{}}`; strings.TrimSpace(string(body)) != want {
		t.Fatalf("GET /overrides: %s, want %s", body, want)
	}
}

// TestOverridesCheckedAsTheFile: a key the policy file may not list (a
// tenant or user over 128 bytes) is not listed through the admin API
// either: 422, nothing applied.
func TestOverridesCheckedAsTheFile(t *testing.T) {
	up := newUpstream(t)
	g := start(t, config(t, up.URL, "[]"), "")
	const digest = "sha256:c232a2ef101127466f5296e1fd375b61c363b57a4f329d62d4780b04f343812b"
	long := strings.Repeat("t", 129)
	for _, body := range []string{
		`{"digest":"` + digest + `","tenant":"` + long + `","plan":"free"}`,
		`{"digest":"` + digest + `","user":"` + long + `","plan":"free"}`,
	} {
		if code := adminDo(t, "PUT", g.admin+"/keys/u1", body); code != 422 {
			t.Errorf("PUT %.60s…: %d, want 422", body, code)
		}
	}
	if _, body := getBody(t, g.admin+"/overrides"); strings.Contains(string(body), "u1") {
		t.Fatalf("refused changes were applied: %s", body)
	}
}
