// Package deploy holds Tollgate's packaging: the Dockerfile, a compose file
// for a fleet with Prometheus and Grafana, and Kubernetes manifests. Its
// tests hold them to the binary: ports, probe paths, the policy's path,
// the user, the build flags.
package deploy

import (
	"bufio"
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/tollgate/tollgate/policy"
)

// dockerfile is what the tests read of the Dockerfile's final stage and
// build step.
type dockerfile struct {
	base       string // the final stage's FROM
	user       string // USER
	env        map[string]string
	expose     []string // EXPOSE
	copies     map[string]string
	entrypoint []string
	cmd        []string
	build      string // the RUN line that builds the binary
}

var jsonArray = regexp.MustCompile(`"([^"]*)"`)

func readDockerfile(t *testing.T) dockerfile {
	t.Helper()
	b, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	d := dockerfile{env: map[string]string{}, copies: map[string]string{}}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		instr, rest, _ := strings.Cut(line, " ")
		array := func() []string {
			var out []string
			for _, m := range jsonArray.FindAllStringSubmatch(rest, -1) {
				out = append(out, m[1])
			}
			return out
		}
		switch strings.ToUpper(instr) {
		case "FROM":
			d = dockerfile{env: map[string]string{}, copies: map[string]string{}, build: d.build}
			d.base = strings.Fields(rest)[0]
		case "USER":
			d.user = rest
		case "ENV":
			k, v, _ := strings.Cut(rest, "=")
			d.env[k] = v
		case "EXPOSE":
			d.expose = strings.Fields(rest)
		case "COPY":
			f := strings.Fields(rest)
			d.copies[f[len(f)-1]] = f[len(f)-2]
		case "ENTRYPOINT":
			d.entrypoint = array()
		case "CMD":
			d.cmd = array()
		case "RUN":
			if strings.Contains(rest, "go build") {
				d.build = rest
			}
		}
	}
	if d.build == "" || d.base == "" {
		t.Fatal("the Dockerfile has no go build step or no final stage")
	}
	return d
}

// flag returns the value of --name in args.
func flag(t *testing.T, args []string, name string) string {
	t.Helper()
	for i, a := range args {
		if a == name && i+1 < len(args) {
			return args[i+1]
		}
	}
	t.Fatalf("%v has no %s", args, name)
	return ""
}

func port(t *testing.T, addr string) string {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestDockerfile: the image runs the binary as an unprivileged user on an
// empty base, exposes the ports its command listens on, and points
// TOLLGATE_CONFIG at the policy it copies, which loads as the command
// would load it.
func TestDockerfile(t *testing.T) {
	d := readDockerfile(t)
	if d.base != "scratch" {
		t.Errorf("final stage FROM %s, want scratch", d.base)
	}
	uid, _, _ := strings.Cut(d.user, ":")
	if n, err := strconv.Atoi(uid); err != nil || n == 0 {
		t.Errorf("USER %q: want a numeric, non-root user", d.user)
	}
	if len(d.entrypoint) != 1 || d.copies[d.entrypoint[0]] == "" {
		t.Errorf("ENTRYPOINT %v is not the copied binary (copies %v)", d.entrypoint, d.copies)
	}
	if len(d.cmd) == 0 || d.cmd[0] != "serve" {
		t.Fatalf("CMD %v does not serve", d.cmd)
	}
	listen, admin := flag(t, d.cmd, "--listen"), flag(t, d.cmd, "--admin")
	if want := []string{port(t, listen), port(t, admin)}; strings.Join(d.expose, " ") != strings.Join(want, " ") {
		t.Errorf("EXPOSE %v, but the command listens on %v", d.expose, want)
	}
	cfg := d.env["TOLLGATE_CONFIG"]
	src := d.copies[cfg]
	if cfg == "" || src == "" {
		t.Fatalf("TOLLGATE_CONFIG %q is not a copied file (copies %v)", cfg, d.copies)
	}
	p := loadImagePolicy(t, filepath.Join("..", src), listen, admin)
	if p.Public != listen || p.Admin != admin || p.AdminToken == "" {
		t.Errorf("the image's policy listens on %s and %s (token %v)", p.Public, p.Admin, p.AdminToken != "")
	}
	for _, want := range []string{"CGO_ENABLED=0", "-tags timetzdata", "-trimpath"} {
		if !strings.Contains(d.build, want) {
			t.Errorf("the build step lacks %s: %s", want, d.build)
		}
	}
}

// loadImagePolicy loads the image's policy as serve would in the image,
// with the secrets its deployments provide.
func loadImagePolicy(t *testing.T, path, listen, admin string) *policy.Policy {
	t.Helper()
	env := policy.Env{Vars: map[string]string{"TOLLGATE_SECRET": strings.Repeat("s", 32), "TOLLGATE_ADMIN_TOKEN": strings.Repeat("t", 32)},
		Public: listen, Admin: admin}
	p, err := policy.LoadEnv(path, env)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// goBuildArgs turns the Dockerfile's build step into go build arguments
// and environment, writing the binary to out.
func goBuildArgs(t *testing.T, step, out string) (env, args []string) {
	t.Helper()
	fields := shellFields(t, step)
	i := 0
	for ; i < len(fields) && strings.Contains(fields[i], "="); i++ {
		env = append(env, fields[i])
	}
	if i+1 >= len(fields) || fields[i] != "go" || fields[i+1] != "build" {
		t.Fatalf("not a go build: %q", step)
	}
	for j := i + 2; j < len(fields); j++ {
		switch f := fields[j]; {
		case f == "-o":
			j++
			args = append(args, "-o", out)
		case strings.Contains(f, "${VERSION}"):
			args = append(args, strings.ReplaceAll(f, "${VERSION}", "test"))
		case strings.HasPrefix(f, "./"):
			args = append(args, "../"+f[2:])
		default:
			args = append(args, f)
		}
	}
	return env, args
}

// shellFields splits a RUN line as the shell would, for the plain words
// and double-quoted strings it holds.
func shellFields(t *testing.T, s string) []string {
	t.Helper()
	var out []string
	var cur strings.Builder
	inQuote, has := false, false
	for _, r := range s {
		switch {
		case r == '"':
			inQuote, has = !inQuote, true
		case (r == ' ' || r == '\t') && !inQuote:
			if has {
				out, has = append(out, cur.String()), false
				cur.Reset()
			}
		default:
			cur.WriteRune(r)
			has = true
		}
	}
	if inQuote {
		t.Fatalf("unbalanced quotes: %q", s)
	}
	if has {
		out = append(out, cur.String())
	}
	return out
}

// TestImageBinary builds the binary with the Dockerfile's flags and runs
// it as the image does, from a root holding only what the image copies:
// it must be static, and serve (tz database and all) with nothing else.
// As root the binary is confined to that root (chroot) and runs as the
// image's user; otherwise it runs from it with an empty environment.
func TestImageBinary(t *testing.T) {
	d := readDockerfile(t)
	root := t.TempDir()
	bin := filepath.Join(root, strings.TrimPrefix(d.entrypoint[0], "/"))
	env, args := goBuildArgs(t, d.build, bin)
	build := exec.Command("go", append([]string{"build"}, args...)...)
	build.Env = append(os.Environ(), env...)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build %v: %v\n%s", args, err, out)
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("the binary is not static: it has a %v segment", p.Type)
		}
	}
	f.Close()
	cfg := d.env["TOLLGATE_CONFIG"]
	policyFile := filepath.Join(root, strings.TrimPrefix(cfg, "/"))
	if err := os.MkdirAll(filepath.Dir(policyFile), 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join("..", d.copies[cfg]))
	if err != nil {
		t.Fatal(err)
	}
	// The image's policy on the memory store (no Redis in this root).
	b = regexp.MustCompile(`(?m)^store:\n(  .*\n)+`).ReplaceAll(b, []byte("store: {type: memory}\n"))
	b = bytes.Replace(b, []byte("secret_env: TOLLGATE_SECRET"), []byte("secret: "+strings.Repeat("s", 32)), 1)
	if err := os.WriteFile(policyFile, b, 0o644); err != nil {
		t.Fatal(err)
	}
	pub, adm := freeAddr(t), freeAddr(t)
	cmd := exec.Command(d.entrypoint[0], "serve", "--listen", pub, "--admin", adm)
	cmd.Env = []string{"TOLLGATE_CONFIG=" + cfg, "TOLLGATE_ADMIN_TOKEN=" + strings.Repeat("t", 32)}
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if os.Geteuid() == 0 {
		uid, _, _ := strings.Cut(d.user, ":")
		n, _ := strconv.Atoi(uid)
		cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root, Credential: &syscall.Credential{Uid: uint32(n), Gid: uint32(n)}}
		cmd.Dir = "/"
	} else {
		cmd.Path, cmd.Dir = bin, root
		cmd.Env[0] = "TOLLGATE_CONFIG=" + policyFile
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		resp, err := http.Get("http://" + pub + "/anything")
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || resp.Header.Get("RateLimit") == "" {
				t.Fatalf("the image's binary answered %d %v: %s", resp.StatusCode, resp.Header, body)
			}
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the image's binary never answered: %v\n%s", err, logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	resp, err := http.Get("http://" + adm + "/readyz")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("readiness probe: %v %v", resp, err)
	}
	resp.Body.Close()
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// yamlDocs reads every YAML document of a file.
func yamlDocs(t *testing.T, path string) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var docs []map[string]any
	dec := yaml.NewDecoder(bytes.NewReader(b))
	for {
		var m map[string]any
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			return docs
		} else if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		docs = append(docs, m)
	}
}

// at walks a decoded YAML value by keys and list indices.
func at(t *testing.T, v any, path ...any) any {
	t.Helper()
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				t.Fatalf("at %v: %v is no map", path, v)
			}
			v = m[k]
		case int:
			l, ok := v.([]any)
			if !ok || k >= len(l) {
				t.Fatalf("at %v: %v has no item %d", path, v, k)
			}
			v = l[k]
		}
	}
	return v
}

// TestKubernetes: the manifests run the image's binary as the image does:
// its user, its ports, probes on the admin listener's paths, the policy
// where TOLLGATE_CONFIG says, a drain shorter than the grace period, and
// the ConfigMap's policy is deploy/policy.yaml.
func TestKubernetes(t *testing.T) {
	d := readDockerfile(t)
	kinds := map[string]map[string]any{}
	for _, f := range []string{"deployment.yaml", "service.yaml", "pdb.yaml", "hpa.yaml", "configmap.yaml"} {
		for _, doc := range yamlDocs(t, filepath.Join("k8s", f)) {
			kinds[fmt.Sprint(doc["kind"])] = doc
		}
	}
	dep := kinds["Deployment"]
	if dep == nil {
		t.Fatal("no Deployment")
	}
	pod := at(t, dep, "spec", "template", "spec")
	uid, _, _ := strings.Cut(d.user, ":")
	if fmt.Sprint(at(t, pod, "securityContext", "runAsUser")) != uid || at(t, pod, "securityContext", "runAsNonRoot") != true {
		t.Errorf("pod securityContext %v, want runAsNonRoot and the image's user %s", at(t, pod, "securityContext"), uid)
	}
	if grace, _ := at(t, pod, "terminationGracePeriodSeconds").(int); grace <= 30 {
		t.Errorf("terminationGracePeriodSeconds %d: the gateway drains for up to 30 s", grace)
	}
	c := at(t, pod, "containers", 0)
	var args []string
	for _, a := range at(t, c, "args").([]any) {
		args = append(args, fmt.Sprint(a))
	}
	if strings.Join(args, " ") != strings.Join(d.cmd, " ") {
		t.Errorf("container args %v, image CMD %v", args, d.cmd)
	}
	ports := map[string]string{}
	for _, p := range at(t, c, "ports").([]any) {
		ports[fmt.Sprint(at(t, p, "name"))] = fmt.Sprint(at(t, p, "containerPort"))
	}
	if ports["http"] != port(t, flag(t, d.cmd, "--listen")) || ports["admin"] != port(t, flag(t, d.cmd, "--admin")) {
		t.Errorf("container ports %v, but the command listens on %s and %s", ports, flag(t, d.cmd, "--listen"), flag(t, d.cmd, "--admin"))
	}
	for probe, path := range map[string]string{"readinessProbe": "/readyz", "livenessProbe": "/healthz"} {
		if at(t, c, probe, "httpGet", "path") != path || at(t, c, probe, "httpGet", "port") != "admin" {
			t.Errorf("%s %v, want GET %s on the admin port", probe, at(t, c, probe), path)
		}
	}
	cfg := ""
	for _, e := range at(t, c, "env").([]any) {
		if at(t, e, "name") == "TOLLGATE_CONFIG" {
			cfg = fmt.Sprint(at(t, e, "value"))
		}
	}
	mount := at(t, c, "volumeMounts", 0)
	cmName := at(t, pod, "volumes", 0, "configMap", "name")
	cm := kinds["ConfigMap"]
	if cfg == "" || filepath.Dir(cfg) != at(t, mount, "mountPath") || cmName != at(t, cm, "metadata", "name") {
		t.Errorf("TOLLGATE_CONFIG %q, mount %v, ConfigMap %v", cfg, mount, cmName)
	}
	data, _ := at(t, cm, "data", filepath.Base(cfg)).(string)
	want, err := os.ReadFile("policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if data != string(want) {
		t.Errorf("the ConfigMap's %s differs from deploy/policy.yaml", filepath.Base(cfg))
	}
	labels := at(t, dep, "spec", "template", "metadata", "labels")
	for _, sel := range []any{at(t, kinds["Service"], "spec", "selector"), at(t, kinds["PodDisruptionBudget"], "spec", "selector", "matchLabels")} {
		if fmt.Sprint(sel) != fmt.Sprint(labels) {
			t.Errorf("selector %v does not select the pods %v", sel, labels)
		}
	}
	for _, p := range at(t, kinds["Service"], "spec", "ports").([]any) {
		if _, ok := ports[fmt.Sprint(at(t, p, "targetPort"))]; !ok {
			t.Errorf("Service port %v targets no container port", p)
		}
	}
	if at(t, kinds["HorizontalPodAutoscaler"], "spec", "scaleTargetRef", "name") != at(t, dep, "metadata", "name") {
		t.Error("the HPA scales another Deployment")
	}
	// While Redis is out, each gateway admits 1/store.instances of every
	// fail_open limit on its own. The HPA scales on CPU, which the traffic
	// that pushed the fleet into its fallback also raises: with instances
	// 2 and 10 replicas, the fleet admitted 5 times each limit. The
	// divisor must be the most gateways that can run.
	var pol struct {
		Store struct {
			Instances int `yaml:"instances"`
		} `yaml:"store"`
	}
	if err := yaml.Unmarshal(want, &pol); err != nil {
		t.Fatal(err)
	}
	most, _ := at(t, kinds["HorizontalPodAutoscaler"], "spec", "maxReplicas").(int)
	if replicas, _ := at(t, dep, "spec", "replicas").(int); replicas > most {
		most = replicas
	}
	if pol.Store.Instances < most {
		t.Errorf("store.instances %d, but up to %d gateways run: in the fallback the fleet admits %d/%d of each limit", pol.Store.Instances, most, most, pol.Store.Instances)
	}
}

// TestCompose: both gateways build from the Dockerfile, map to its public
// port, and get the secrets the image's policy names; Prometheus scrapes
// their admin port with the token; Grafana gets the shipped dashboard.
func TestCompose(t *testing.T) {
	d := readDockerfile(t)
	docs := yamlDocs(t, "compose.yaml")
	services := at(t, docs[0], "services").(map[string]any)
	pub := port(t, flag(t, d.cmd, "--listen"))
	adm := port(t, flag(t, d.cmd, "--admin"))
	gateways := 0
	for name, s := range services {
		if !strings.HasPrefix(name, "gateway") {
			continue
		}
		gateways++
		if at(t, s, "build", "dockerfile") != "deploy/Dockerfile" || at(t, s, "build", "context") != ".." {
			t.Errorf("%s does not build the image: %v", name, at(t, s, "build"))
		}
		p := fmt.Sprint(at(t, s, "ports", 0))
		if !strings.HasSuffix(p, ":"+pub) {
			t.Errorf("%s maps %s, not the public port %s", name, p, pub)
		}
		env := at(t, s, "environment").(map[string]any)
		for _, k := range []string{"TOLLGATE_SECRET", "TOLLGATE_ADMIN_TOKEN", "TOLLGATE_REDIS_URL"} {
			if env[k] == nil {
				t.Errorf("%s lacks %s", name, k)
			}
		}
	}
	if gateways != 2 {
		t.Errorf("%d gateways, want 2", gateways)
	}
	prom := yamlDocs(t, "prometheus.yml")[0]
	job := at(t, prom, "scrape_configs", 0)
	if at(t, job, "metrics_path") != "/metrics" || at(t, job, "authorization", "type") != "Bearer" {
		t.Errorf("scrape job %v", job)
	}
	for _, target := range at(t, job, "static_configs", 0, "targets").([]any) {
		host, p, _ := net.SplitHostPort(fmt.Sprint(target))
		if p != adm || services[host] == nil {
			t.Errorf("scrape target %v is not a gateway's admin port %s", target, adm)
		}
	}
	for _, v := range at(t, services["grafana"], "volumes").([]any) {
		src, _, _ := strings.Cut(fmt.Sprint(v), ":")
		if _, err := os.Stat(src); err != nil {
			t.Errorf("grafana mounts %s: %v", src, err)
		}
	}
}
