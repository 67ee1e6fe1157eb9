package policy_test

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/policy"
)

func TestUnlimitedAndAllowlist(t *testing.T) {
	src := strings.Replace(valid, "  free: {rate: 100, period: 1m}\n", "  free: {rate: 100, period: 1m}\n  internal: {unlimited: true}\n", 1) +
		"allowlist: {keys: [k1], users: [carol], tenants: [ops], addresses: [10.0.0.0/8, 192.0.2.1]}\n"
	p, err := policy.Parse([]byte(src), "p.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if pl := p.Plans["internal"]; pl == nil || !pl.Unlimited || len(pl.Limits) != 0 {
		t.Fatalf("internal: %+v", pl)
	}
	for _, b := range p.Budgets() {
		if strings.Contains(b.Name, "internal") {
			t.Errorf("an unlimited plan has a budget: %s", b.Name)
		}
	}
	l := p.Allowlist
	if !l.Keys["k1"] || !l.Users["carol"] || !l.Tenants["ops"] || !l.Address(netip.MustParseAddr("10.1.2.3")) ||
		!l.Address(netip.MustParseAddr("192.0.2.1")) || l.Address(netip.MustParseAddr("192.0.2.2")) {
		t.Fatalf("allowlist: %+v", l)
	}
	for _, c := range []struct {
		name, src string
		want      []string
	}{
		{"unlimited with a rate", strings.Replace(valid, "  free: {rate: 100, period: 1m}", "  free: {rate: 100, period: 1m, unlimited: true}", 1),
			[]string{"p.yaml:7:", "plans.free.unlimited", "takes no limits"}},
		{"unknown key id", valid + "allowlist: {keys: [k2]}\n", []string{"allowlist.keys[0]", `no API key with id "k2"`}},
		{"bad address", valid + "allowlist: {addresses: [10.0.0.0/33]}\n", []string{"allowlist.addresses[0]", "not a CIDR"}},
		{"empty user", valid + "allowlist: {users: [\"\"]}\n", []string{"allowlist.users[0]"}},
		{"unknown field", valid + "allowlist: {user: [carol]}\n", []string{`unknown field "user"`}},
	} {
		if _, err := policy.Parse([]byte(c.src), "p.yaml"); err == nil {
			t.Errorf("%s: accepted", c.name)
		} else {
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%s: error lacks %q:\n%v", c.name, w, err)
				}
			}
		}
	}
}

func TestRouteLimitModeAndRefusal(t *testing.T) {
	const route = "  - {name: api, path: /api/, upstream: \"http://127.0.0.1:9000\"}"
	with := func(extra string) string {
		return strings.Replace(valid, route, "  - {name: api, path: /api/, upstream: \"http://127.0.0.1:9000\", "+extra+"}", 1)
	}
	p, err := policy.Parse([]byte(with(`limit: {rate: 5, period: 1m}, limit_mode: add, refusal: {body: busy}`)), "p.yaml")
	if err != nil {
		t.Fatal(err)
	}
	r := p.Routes[1]
	if !r.LimitAdds || r.Limit == nil || r.Refusal == nil || r.Refusal.Status != 429 || r.Refusal.ContentType != "text/plain; charset=utf-8" || string(r.Refusal.Body) != "busy" {
		t.Fatalf("route: %+v %+v", r, r.Refusal)
	}
	for _, c := range []struct {
		name, src string
		want      []string
	}{
		{"unknown mode", with(`limit: {rate: 5, period: 1m}, limit_mode: both`), []string{"p.yaml:13:", "routes[1].limit_mode", "want replace", "or add"}},
		{"a mode without a limit", with(`limit_mode: add`), []string{"routes[1].limit_mode", "set limit too"}},
		{"add checks the plan's capacity too", with(`cost: 150, limit: {rate: 500, period: 1m}, limit_mode: add`), []string{"routes[1].cost", `exceeds plan "free"'s capacity 100`}},
		{"a 3xx refusal", with(`refusal: {status: 302}`), []string{"routes[1].refusal.status", "400 to 599"}},
		{"an empty refusal", with(`refusal: {}`), []string{"routes[1].refusal", "set status, body or both"}},
		{"a content type without a body", with(`refusal: {status: 503, content_type: text/html}`), []string{"routes[1].refusal.content_type", "set body too"}},
		{"a bad content type", with(`refusal: {body: x, content_type: "text/"}`), []string{"not a media type"}},
		{"a body too long", with(`refusal: {body: "` + strings.Repeat("x", 5000) + `"}`), []string{"routes[1].refusal.body", "at most 4096 bytes"}},
		{"a misspelt field", with(`refusal: {status: 503, bdy: x}`), []string{`unknown field "bdy"`}},
	} {
		if _, err := policy.Parse([]byte(c.src), "p.yaml"); err == nil {
			t.Errorf("%s: accepted", c.name)
		} else {
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%s: error lacks %q:\n%v", c.name, w, err)
				}
			}
		}
	}
}
