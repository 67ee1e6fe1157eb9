package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tollgate/tollgate/gateway"
	"github.com/tollgate/tollgate/policy"
)

// Target processes. Every server the gateway suite loads runs in a process
// of its own, apart from the load generator: the upstream, the plain proxy
// and each gateway. The CPU a target's process reports over a cell is then
// that target's alone, and the upstream's work is counted against nobody.

// targetEnv, when set (to a targetSpec as JSON), makes this program serve
// one target instead of measuring: it prints the target's URL (and a
// gateway's admin URL after a tab), then
// answers each line on its standard input with the CPU time it has used
// so far (nanoseconds, user and system), and exits when its standard input
// closes.
const targetEnv = "TOLLGATE_BENCH_TARGET"

// The kinds of target.
const (
	kindUpstream = "upstream" // answers "ok" at once
	kindPlain    = "plain"    // httputil.ReverseProxy
	kindMemory   = "memory"   // the gateway on its memory store
	kindRedis    = "redis"    // the gateway on Redis
	kindCap      = "cap"      // the gateway on its memory store and the default cap per client
)

// targetSpec is one target process's task.
type targetSpec struct {
	Kind       string `json:"kind"`
	Upstream   string `json:"upstream,omitempty"`   // the upstream's URL (all but kindUpstream)
	Redis      string `json:"redis,omitempty"`      // the Redis address (kindRedis)
	CPUProfile string `json:"cpuprofile,omitempty"` // write a CPU profile of the process's whole life here
}

// benchConnsPerClient is the cap per client address of the gateways the
// cells measure: far above the connections the load generator opens from
// its one address, so the cells measure the proxy, not the cap.
const benchConnsPerClient = 1024

const gatewayPolicy = `version: bench
listeners: {public: "127.0.0.1:0", admin: "127.0.0.1:1"CAP}
identity: {secret: bench-secret-0123456789abcdef, anonymous_plan: open}
plans:
  open: {rate: 1000000, period: 1s}
routes:
  - {name: all, path: /, upstream: "UPSTREAM"}
`

// runTarget is the program when targetEnv is set.
func runTarget(js string) {
	var spec targetSpec
	if err := json.Unmarshal([]byte(js), &spec); err != nil {
		fatal(fmt.Errorf("reading the target's spec: %w", err))
	}
	if spec.CPUProfile != "" {
		f, err := os.Create(spec.CPUProfile)
		if err != nil {
			fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fatal(err)
		}
		defer pprof.StopCPUProfile()
	}
	fmt.Println(serveTarget(spec))
	for sc := bufio.NewScanner(os.Stdin); sc.Scan(); {
		fmt.Println(int64(cpuTime()))
	}
}

// serveTarget starts the target spec asks for and returns its URL (and a
// gateway's admin URL after a tab).
func serveTarget(spec targetSpec) string {
	switch spec.Kind {
	case kindUpstream:
		return serve(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			w.Write([]byte("ok"))
		}))
	case kindPlain:
		u, err := url.Parse(spec.Upstream)
		if err != nil {
			fatal(err)
		}
		return serve(&httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(u); pr.SetXForwarded() },
			Transport: &http.Transport{MaxIdleConnsPerHost: 1024}, ErrorLog: log.New(io.Discard, "", 0)})
	}
	limit := fmt.Sprintf(", max_conns_per_client: %d", benchConnsPerClient)
	if spec.Kind == kindCap {
		limit = "" // the default
	}
	src := strings.NewReplacer("UPSTREAM", spec.Upstream, "CAP", limit).Replace(gatewayPolicy)
	p, err := policy.Parse([]byte(src), "bench.yaml")
	if err != nil {
		fatal(err)
	}
	redisURL := ""
	if spec.Kind == kindRedis {
		redisURL = "redis://" + spec.Redis + "/0"
	}
	g, err := gateway.New(gateway.Options{Policy: p, RedisURL: redisURL, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		fatal(err)
	}
	pub, adm := listen(), listen()
	go g.Serve(context.Background(), pub, adm)
	return "http://" + pub.Addr().String() + "\thttp://" + adm.Addr().String()
}

// cpuTime returns the CPU time this process has used, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		fatal(fmt.Errorf("reading the CPU time: %w", err))
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// targetProc is a target's process, seen from the load generator.
type targetProc struct {
	target
	admin string // a gateway's admin listener
	kind  string
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Scanner
}

// startTarget runs this program again as the target spec asks for.
func startTarget(name string, spec targetSpec) *targetProc {
	exe, err := os.Executable()
	if err != nil {
		fatal(err)
	}
	js, _ := json.Marshal(spec)
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), targetEnv+"="+string(js))
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		fatal(err)
	}
	if err := cmd.Start(); err != nil {
		fatal(fmt.Errorf("starting the target %s: %w", name, err))
	}
	p := &targetProc{kind: spec.Kind, cmd: cmd, stdin: stdin, out: bufio.NewScanner(stdout)}
	if !p.out.Scan() {
		fatal(fmt.Errorf("starting the target %s: no URL: %v", name, p.out.Err()))
	}
	u, admin, _ := strings.Cut(p.out.Text(), "\t")
	p.target, p.admin = target{name, u}, admin
	return p
}

// storeCalls returns the calls a gateway has made to its shared store
// (tollgate_store_calls_total: Redis, not the fallback while Redis'
// breaker is open).
func (p *targetProc) storeCalls() float64 {
	resp, err := http.Get(p.admin + "/metrics")
	if err != nil {
		fatal(fmt.Errorf("reading the metrics of %s: %w", p.name, err))
	}
	defer resp.Body.Close()
	for sc := bufio.NewScanner(resp.Body); sc.Scan(); {
		if v, ok := strings.CutPrefix(sc.Text(), "tollgate_store_calls_total "); ok {
			n, _ := strconv.ParseFloat(v, 64)
			return n
		}
	}
	fatal(fmt.Errorf("reading the metrics of %s: no tollgate_store_calls_total", p.name))
	return 0
}

// cpu returns the CPU time the target's process has used so far.
func (p *targetProc) cpu() time.Duration {
	fmt.Fprintln(p.stdin, "cpu")
	if !p.out.Scan() {
		fatal(fmt.Errorf("reading the CPU time of %s: %v", p.name, p.out.Err()))
	}
	n, err := strconv.ParseInt(p.out.Text(), 10, 64)
	if err != nil {
		fatal(fmt.Errorf("reading the CPU time of %s: %w", p.name, err))
	}
	return time.Duration(n)
}

// stop ends the target's process (writing its profile, if any).
func (p *targetProc) stop() {
	p.stdin.Close()
	p.cmd.Wait()
}

func listen() net.Listener {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fatal(err)
	}
	return l
}

func serve(h http.Handler) string {
	l := listen()
	go (&http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Second,
		ErrorLog: log.New(io.Discard, "", 0)}).Serve(l)
	return "http://" + l.Addr().String()
}
