package gateway_test

import (
	"encoding/json"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/fixture"
)

// TestProxyErrorsLogAsJSON: an upstream that promises a body and closes
// early makes ReverseProxy log an error copying it; that line must come out
// of the gateway's slog handler as JSON, not as plain text on the standard
// logger.
func TestProxyErrorsLogAsJSON(t *testing.T) {
	std := &fixture.SyncBuffer{}
	log.SetOutput(std)
	t.Cleanup(func() { log.SetOutput(os.Stderr) })
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, buf, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		buf.WriteString("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 1000\r\n\r\nonly ten b")
		buf.Flush()
	}))
	defer up.Close()
	g := start(t, config(t, up.URL, "[]"), "")
	if resp, err := client.Get(g.public + "/api/items"); err == nil {
		_, err = io.ReadAll(resp.Body)
		resp.Body.Close()
		if err == nil {
			t.Fatal("the client read a whole body the upstream never sent")
		}
	}
	const msg = "ReverseProxy read error during body copy"
	var line string
	waitFor(t, "the proxy's log line", 5*time.Second, func() bool {
		for _, l := range strings.Split(g.logs.String(), "\n") {
			if strings.Contains(l, msg) {
				line = l
				return true
			}
		}
		return strings.Contains(std.String(), msg) // there: fail below
	})
	if strings.Contains(std.String(), "ReverseProxy") {
		t.Fatalf("the proxy logged as plain text on the standard logger: %s", std.String())
	}
	var rec struct{ Level, Msg, Logger string }
	if err := json.Unmarshal([]byte(line), &rec); err != nil || rec.Level != "WARN" || rec.Logger != "reverseproxy" || !strings.Contains(rec.Msg, msg) {
		t.Fatalf("the proxy's log line is not a JSON warning: %s (%v)", line, err)
	}
	t.Logf("logged: %s", line)
}
