package gateway_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// headless loads page in headless Chromium (a fresh profile) and returns
// the DOM once the page's scripts have settled.
func headless(t *testing.T, page string, extra ...string) string {
	t.Helper()
	return string(browse(t, page, 15*time.Second, append([]string{"--dump-dom"}, extra...)...))
}

// browse runs headless Chromium (a fresh profile) on page for budget of
// virtual time with extra flags (--dump-dom, --screenshot=...), and
// returns what it printed. Chromium spends the budget in real time, and
// the browser tests run in parallel: at most browsers of them run
// Chromium at once, so that each gets the CPU it needs; and a run is
// given 3 minutes, over 10 times what the longest (a budget of 15 s)
// takes on a loaded machine, before it counts as hung.
func browse(t *testing.T, page string, budget time.Duration, extra ...string) []byte {
	t.Helper()
	bin := chromium(t)
	browsing <- struct{}{}
	defer func() { <-browsing }()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	args := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
		"--user-data-dir=" + t.TempDir(), "--virtual-time-budget=" + strconv.FormatInt(budget.Milliseconds(), 10)}
	out, err := exec.CommandContext(ctx, bin, append(append(args, extra...), page)...).Output()
	if err != nil {
		t.Fatalf("chromium %s %v: %v", page, extra, err)
	}
	return out
}

// browsing holds a place for each Chromium running (see browse).
var browsing = make(chan struct{}, browsers)

// browsers is how many Chromium processes the tests run at once.
const browsers = 2

// adminTarget is a gateway with something to roll back to and a runtime
// override in place, for attacks on its admin API to try to change.
type adminTarget struct {
	*running
}

func newAdminTarget(t *testing.T) adminTarget {
	t.Helper()
	up := newUpstream(t)
	g := start(t, config(t, up.URL, "[]"), "")
	p2 := quickstart(t, up.URL, "version: quickstart-1", "version: quickstart-2")
	if err := g.g.Reload(p2); err != nil {
		t.Fatal(err)
	}
	if code := adminDo(t, "PUT", g.admin+"/tenants/demo", `{"plan":"pro"}`); code != 204 {
		t.Fatalf("seeding a tenant override: %d", code)
	}
	a := adminTarget{g}
	if s := a.state(); !strings.Contains(s, `"version":"quickstart-2"`) || !strings.Contains(s, `"previous":{`) ||
		!strings.Contains(s, `"tenants":{"demo":"pro"}`) {
		t.Fatalf("the target is not set up: %s", s)
	}
	return a
}

// state reads what an attack on the admin API would change: the active and
// previous policy, the overrides and the rollback counter. It is safe to
// call from any goroutine (it reports failures in the string).
func (a adminTarget) state() string {
	var b strings.Builder
	for _, path := range []string{"/policy", "/overrides", "/metrics"} {
		resp, err := client.Get(a.admin + path)
		if err != nil {
			fmt.Fprintf(&b, "%s: %v\n", path, err)
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		switch path {
		case "/policy":
			// loaded_at changes with every rollback; version and previous say enough.
			fmt.Fprintf(&b, "%s %d %s\n", path, resp.StatusCode, regexp.MustCompile(`"loaded_at":"[^"]*",?`).ReplaceAll(body, nil))
		case "/metrics":
			fmt.Fprintf(&b, "%s %d %s\n", path, resp.StatusCode, regexp.MustCompile(`(?m)^tollgate_policy_reloads_total\{result="rollback"\} .*$`).Find(body))
		default:
			fmt.Fprintf(&b, "%s %d %s", path, resp.StatusCode, body)
		}
	}
	return b.String()
}

// attackPage is a page on another origin that tries to change the admin
// API's state every way a page can without the user's help. After each
// attempt it tells its own server (/mark), which records the admin state
// then, so each attempt is judged on its own.
const attackPage = `<!doctype html>
<html><body><pre id="log"></pre><p id="done"></p>
<script>
const A = "ADMIN";
const log = s => { document.getElementById("log").textContent += s + "\n"; };
const mark = step => fetch("/mark?step=" + encodeURIComponent(step)).catch(() => {});
async function attempt(step, f) {
  try { log(step + ": " + await f()); } catch (e) { log(step + ": " + e.name); }
  await mark(step);
}
const wait = ms => new Promise(r => setTimeout(r, ms));
function form(step, enctype) {
  return new Promise(resolve => {
    const frame = document.createElement("iframe");
    frame.name = step;
    document.body.appendChild(frame);
    const f = document.createElement("form");
    f.method = "POST"; f.action = A + "/policy/rollback"; f.enctype = enctype; f.target = step;
    const i = document.createElement("input");
    i.name = '{"a":"'; i.value = '"}'; // text/plain sends {"a":"="}
    f.appendChild(i);
    document.body.appendChild(f);
    setTimeout(() => {
      frame.onload = () => resolve("submitted, frame loaded");
      f.submit();
    }, 0);
    setTimeout(() => resolve("submitted, no load seen"), 3000);
  });
}
const key = JSON.stringify({digest: "sha256:c232a2ef101127466f5296e1fd375b61c363b57a4f329d62d4780b04f343812b", tenant: "t9", plan: "pro"});
(async () => {
  await attempt("no-cors POST /policy/rollback, text/plain body", () =>
    fetch(A + "/policy/rollback", {method: "POST", mode: "no-cors", body: "{}"}).then(r => r.type));
  await attempt("no-cors POST /policy/rollback, no body", () =>
    fetch(A + "/policy/rollback", {method: "POST", mode: "no-cors"}).then(r => r.type));
  await attempt("no-cors POST /policy/rollback claiming JSON", () =>
    fetch(A + "/policy/rollback", {method: "POST", mode: "no-cors", headers: {"Content-Type": "application/json"}, body: "{}"}).then(r => r.type));
  await attempt("sendBeacon /policy/rollback", async () => {
    const sent = navigator.sendBeacon(A + "/policy/rollback", "{}");
    await wait(500);
    return sent ? "queued" : "refused";
  });
  await attempt("cors PUT /keys/x, JSON", () =>
    fetch(A + "/keys/x", {method: "PUT", headers: {"Content-Type": "application/json"}, body: key}).then(r => r.status));
  await attempt("cors PUT /tenants/demo, JSON", () =>
    fetch(A + "/tenants/demo", {method: "PUT", headers: {"Content-Type": "application/json"}, body: '{"plan":"free"}'}).then(r => r.status));
  await attempt("cors DELETE /tenants/demo", () =>
    fetch(A + "/tenants/demo", {method: "DELETE"}).then(r => r.status));
  await attempt("cors POST /policy/rollback, JSON", () =>
    fetch(A + "/policy/rollback", {method: "POST", headers: {"Content-Type": "application/json"}, body: "{}"}).then(r => r.status));
  await attempt("form POST /policy/rollback, urlencoded", () => form("urlencoded", "application/x-www-form-urlencoded"));
  await attempt("form POST /policy/rollback, multipart", () => form("multipart", "multipart/form-data"));
  await attempt("form POST /policy/rollback, text/plain", () => form("textplain", "text/plain"));
  document.getElementById("done").textContent = "attacks done";
})();
</script></body></html>
`

// TestAdminRefusesBrowserAttacks opens an attacker's page in headless
// Chromium, on another origin than the admin listener (127.0.0.1 with no
// token, the default): once same-site (127.0.0.1, another port) and once
// cross-site (localhost). The page's requests (no-cors fetches, a beacon,
// CORS fetches with JSON, auto-submitted forms) must change nothing. Each
// attack has a gateway of its own (the memory store): they run in
// parallel.
func TestAdminRefusesBrowserAttacks(t *testing.T) {
	t.Parallel()
	for _, site := range []struct{ name, host string }{
		{"same-site, another port", "127.0.0.1"},
		{"cross-site", "localhost"},
	} {
		t.Run(site.name, func(t *testing.T) {
			t.Parallel()
			a := newAdminTarget(t)
			initial := a.state()
			before := initial
			var mu sync.Mutex
			var changed []string
			evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				switch r.URL.Path {
				case "/":
					w.Header().Set("Content-Type", "text/html; charset=utf-8")
					io.WriteString(w, strings.Replace(attackPage, "ADMIN", a.admin, 1))
				case "/mark":
					now := a.state()
					mu.Lock()
					if now != before {
						changed = append(changed, fmt.Sprintf("after %q the admin state is\n%s", r.URL.Query().Get("step"), now))
						before = now // judge the next step on its own
					}
					mu.Unlock()
				default:
					http.NotFound(w, r)
				}
			}))
			defer evil.Close()
			u, _ := url.Parse(evil.URL)
			page := "http://" + site.host + ":" + u.Port() + "/"
			dom := headless(t, page)
			if !strings.Contains(dom, `id="done">attacks done<`) {
				t.Fatalf("the attack page did not run to its end; DOM:\n%s", dom)
			}
			t.Logf("what the page saw:\n%s", regexp.MustCompile(`(?s)<pre id="log">(.*?)</pre>`).FindStringSubmatch(dom)[1])
			mu.Lock()
			for _, c := range changed {
				t.Error(c)
			}
			mu.Unlock()
			if now := a.state(); now != initial {
				t.Errorf("after the attack page the admin state is\n%s\nwas\n%s", now, initial)
			}
		})
	}
}

// rebindPage is served by a DNS-rebinding attacker under its own name, which
// then resolves to the admin listener: the page's requests are same-origin.
const rebindPage = `<!doctype html>
<html><body><pre id="log"></pre><p id="done"></p>
<script>
const log = s => { document.getElementById("log").textContent += s + "\n"; };
const key = JSON.stringify({digest: "sha256:c232a2ef101127466f5296e1fd375b61c363b57a4f329d62d4780b04f343812b", tenant: "t9", plan: "pro"});
(async () => {
  for (const [step, method, path, body] of [
    ["read /overrides", "GET", "/overrides"],
    ["POST /policy/rollback", "POST", "/policy/rollback", "{}"],
    ["PUT /keys/x", "PUT", "/keys/x", key],
    ["DELETE /tenants/demo", "DELETE", "/tenants/demo", "{}"],
  ]) {
    try {
      const r = await fetch(path, {method, headers: body ? {"Content-Type": "application/json"} : {}, body});
      log(step + ": " + r.status + " " + (await r.text()).trim().slice(0, 300));
    } catch (e) { log(step + ": " + e.name); }
  }
  document.getElementById("done").textContent = "attacks done";
})();
</script></body></html>
`

// TestAdminRefusesDNSRebinding: a page served under an attacker's name whose
// DNS then points at the admin listener talks to the admin API same-origin,
// with JSON, so only the Host header tells the two apart. Chromium reaches
// rebind.test through a proxy that plays the attacker's DNS: / is the
// attacker's page, everything else goes to the admin listener with the Host
// the browser sent. Its gateway is its own (the memory store): it runs
// in parallel.
func TestAdminRefusesDNSRebinding(t *testing.T) {
	t.Parallel()
	a := newAdminTarget(t)
	before := a.state()
	adminURL, _ := url.Parse(a.admin)
	toAdmin := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) {
		pr.SetURL(adminURL)
		pr.Out.Host = pr.In.Host // what the browser sent: rebind.test:port
	}}
	dns := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/" {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			io.WriteString(w, rebindPage)
			return
		}
		toAdmin.ServeHTTP(w, r)
	}))
	defer dns.Close()
	dom := headless(t, "http://rebind.test:"+adminURL.Port()+"/", "--proxy-server="+dns.URL)
	if !strings.Contains(dom, `id="done">attacks done<`) {
		t.Fatalf("the attack page did not run to its end; DOM:\n%s", dom)
	}
	seen := regexp.MustCompile(`(?s)<pre id="log">(.*?)</pre>`).FindStringSubmatch(dom)[1]
	t.Logf("what the page saw:\n%s", seen)
	if !strings.Contains(seen, "read /overrides: 403") || strings.Contains(seen, `"tenants"`) {
		t.Errorf("the rebinding page read the overrides:\n%s", seen)
	}
	if now := a.state(); now != before {
		t.Errorf("after the rebinding page the admin state is\n%s\nwas\n%s", now, before)
	}
}
