package gateway_test

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/websocket"
)

// A tab is a page open in headless Chromium, driven over the DevTools
// protocol: for tests that act on a page (click) rather than only load
// it (headless).
type tab struct {
	ws *websocket.Conn
	id int
}

// openTab opens a blank tab in headless Chromium (a fresh profile,
// holding one of the browsing places), closed with the test.
func openTab(t *testing.T) *tab {
	t.Helper()
	bin := chromium(t)
	browsing <- struct{}{}
	t.Cleanup(func() { <-browsing })
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	cmd := exec.CommandContext(ctx, bin, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
		"--window-size=1280,1400", "--remote-debugging-port=0", "--remote-allow-origins=*", "--user-data-dir="+t.TempDir(), "about:blank")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("chromium: %v", err)
	}
	// "DevTools listening on ws://127.0.0.1:PORT/devtools/browser/ID"
	var browser string
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		if _, rest, ok := strings.Cut(sc.Text(), "DevTools listening on "); ok {
			browser = rest
			break
		}
	}
	// Closed as a user closes it, so that its helper processes are done
	// with the profile before the test removes it.
	t.Cleanup(func() {
		if ws, err := websocket.Dial(browser, "", "http://127.0.0.1/"); err == nil {
			websocket.JSON.Send(ws, map[string]any{"id": 1, "method": "Browser.close"})
			ws.Close()
		}
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(time.Minute): // a hung browser only
			cmd.Process.Kill()
			<-done
		}
	})
	host, _, _ := strings.Cut(strings.TrimPrefix(browser, "ws://"), "/")
	if host == "" {
		t.Fatal("chromium did not say where DevTools listens")
	}
	go func() {
		for sc.Scan() { // drain, so that Chromium never blocks on its stderr
		}
	}()
	var targets []struct{ Type, URL, WebSocketDebuggerURL string }
	resp, err := http.Get("http://" + host + "/json/list")
	if err != nil {
		t.Fatal(err)
	}
	err = json.NewDecoder(resp.Body).Decode(&targets)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, tg := range targets {
		if tg.Type == "page" {
			ws, err := websocket.Dial(tg.WebSocketDebuggerURL, "", "http://127.0.0.1/")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { ws.Close() })
			return &tab{ws: ws}
		}
	}
	t.Fatalf("no page among Chromium's targets: %+v", targets)
	return nil
}

// navigate loads page in the tab and waits until it has loaded.
func (tb *tab) navigate(t *testing.T, page string) {
	t.Helper()
	tb.call(t, "Page.navigate", map[string]any{"url": page})
	tb.waitFor(t, `document.readyState === "complete" && location.href !== "about:blank"`)
}

// call sends a DevTools command and returns its result, skipping the
// events between.
func (tb *tab) call(t *testing.T, method string, params any) json.RawMessage {
	t.Helper()
	tb.id++
	if err := websocket.JSON.Send(tb.ws, map[string]any{"id": tb.id, "method": method, "params": params}); err != nil {
		t.Fatalf("%s: %v", method, err)
	}
	tb.ws.SetReadDeadline(time.Now().Add(2 * time.Minute)) // only a hung browser takes it
	for {
		var msg struct {
			ID     int
			Result json.RawMessage
			Error  *struct{ Message string }
		}
		if err := websocket.JSON.Receive(tb.ws, &msg); err != nil {
			t.Fatalf("%s: %v", method, err)
		}
		if msg.ID != tb.id {
			continue
		}
		if msg.Error != nil {
			t.Fatalf("%s: %s", method, msg.Error.Message)
		}
		return msg.Result
	}
}

// eval evaluates a JavaScript expression in the page, awaiting it if it
// is a promise, and returns its value as JSON.
func (tb *tab) eval(t *testing.T, expr string) json.RawMessage {
	t.Helper()
	var r struct {
		Result           struct{ Value json.RawMessage }
		ExceptionDetails *struct {
			Text      string
			Exception struct{ Description string }
		}
	}
	if err := json.Unmarshal(tb.call(t, "Runtime.evaluate", map[string]any{"expression": expr, "awaitPromise": true, "returnByValue": true}), &r); err != nil {
		t.Fatal(err)
	}
	if e := r.ExceptionDetails; e != nil {
		t.Fatalf("evaluating %.200s: %s %s", expr, e.Text, e.Exception.Description)
	}
	return r.Result.Value
}

// evalString is eval of an expression whose value is a string.
func (tb *tab) evalString(t *testing.T, expr string) string {
	t.Helper()
	var s string
	if err := json.Unmarshal(tb.eval(t, expr), &s); err != nil {
		t.Fatalf("evaluating %.200s: not a string: %v", expr, err)
	}
	return s
}

// waitFor waits until the JavaScript condition cond holds in the page.
// The bound only catches a page that never gets there.
func (tb *tab) waitFor(t *testing.T, cond string) {
	t.Helper()
	const bound = 60 * time.Second
	ok := tb.eval(t, fmt.Sprintf(`new Promise(done => { const end = Date.now() + %d;
		const f = () => { if (%s) done(true); else if (Date.now() > end) done(false); else setTimeout(f, 20); }; f(); })`, bound.Milliseconds(), cond))
	if string(ok) != "true" {
		t.Fatalf("the page never got to %s", cond)
	}
}

// screenshot saves the page as a PNG at path.
func (tb *tab) screenshot(t *testing.T, path string) {
	t.Helper()
	var r struct{ Data string }
	if err := json.Unmarshal(tb.call(t, "Page.captureScreenshot", map[string]any{"format": "png"}), &r); err != nil {
		t.Fatal(err)
	}
	b, err := base64.StdEncoding.DecodeString(r.Data)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}
