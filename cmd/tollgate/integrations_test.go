package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"
	"gopkg.in/yaml.v3"

	"github.com/tollgate/tollgate/envoyrls"
	"github.com/tollgate/tollgate/internal/filewatch/configmap"
	"github.com/tollgate/tollgate/internal/redistest"
	"github.com/tollgate/tollgate/internal/testenv"
)

// integrationsPage is the page whose manifests TestIntegrationManifests
// checks.
const integrationsPage = "docs/integrations/istio-envoy-gateway.md"

// manifests are the Kubernetes objects of a page's YAML blocks, by kind.
type manifests map[string]map[string]any

// pageManifests reads the YAML blocks of a Markdown page of the
// repository, each one or more documents.
func pageManifests(t *testing.T, page string) manifests {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", page))
	if err != nil {
		t.Fatal(err)
	}
	m := manifests{}
	for _, block := range regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllSubmatch(b, -1) {
		dec := yaml.NewDecoder(bytes.NewReader(block[1]))
		for {
			var doc map[string]any
			if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s: %v\n%s", page, err, block[1])
			}
			kind := fmt.Sprint(doc["kind"])
			if m[kind] != nil {
				t.Fatalf("%s: two %s", page, kind)
			}
			m[kind] = doc
		}
	}
	return m
}

// dig walks a decoded YAML value by keys and list indices; nil where the
// path leads nowhere.
func dig(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, _ := v.(map[string]any)
			v = m[k]
		case int:
			l, _ := v.([]any)
			if k >= len(l) {
				return nil
			}
			v = l[k]
		}
	}
	return v
}

// strs is a decoded YAML list as strings.
func strs(v any) []string {
	var out []string
	for _, e := range dig(v).([]any) {
		out = append(out, fmt.Sprint(e))
	}
	return out
}

// imageFacts are what the manifests must agree with of the image and of
// the gateway's own manifests: deploy/Dockerfile's entrypoint and
// deploy/k8s's image name.
func imageFacts(t *testing.T) (entrypoint []string, image string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "deploy", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^ENTRYPOINT \[(.*)\]$`).FindSubmatch(b)
	if m == nil {
		t.Fatal("deploy/Dockerfile has no ENTRYPOINT [...]")
	}
	for _, q := range regexp.MustCompile(`"([^"]*)"`).FindAllSubmatch(m[1], -1) {
		entrypoint = append(entrypoint, string(q[1]))
	}
	b, err = os.ReadFile(filepath.Join("..", "..", "deploy", "k8s", "deployment.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var dep map[string]any
	if err := yaml.Unmarshal(b, &dep); err != nil {
		t.Fatal(err)
	}
	return entrypoint, fmt.Sprint(dig(dep, "spec", "template", "spec", "containers", 0, "image"))
}

// TestIntegrationManifests: the Istio manifests of the integrations page
// run Tollgate's image as `tollgate rls` with settings it reads without a
// warning, on ports and a mount that agree with the Service, the probes,
// the ConfigMap and the EnvoyFilter; run so (on a real Redis, the
// ConfigMap laid out as the kubelet mounts it), they serve the
// ConfigMap's limits, and a ConfigMap update. The Envoy Gateway
// configuration points its rate-limit Deployment at the same image and
// command, and the variables its table names are ones rls knows.
func TestIntegrationManifests(t *testing.T) {
	m := pageManifests(t, integrationsPage)
	entrypoint, image := imageFacts(t)
	for _, kind := range []string{"ConfigMap", "Service", "Deployment", "EnvoyFilter", "EnvoyGateway"} {
		if m[kind] == nil {
			t.Fatalf("%s has no %s", integrationsPage, kind)
		}
	}
	env := istioChecks(t, m, image)
	t.Run("istio served", func(t *testing.T) { serveIstio(t, m, env) })
	t.Run("envoy gateway", func(t *testing.T) { envoyGatewayChecks(t, m, entrypoint, image) })
}

// istioChecks checks that the Istio manifests agree with one another and
// with what rls reads, and returns the container's environment.
func istioChecks(t *testing.T, m manifests, image string) map[string]string {
	pod := dig(m["Deployment"], "spec", "template", "spec")
	c := dig(pod, "containers", 0)
	if dig(c, "image") != image || dig(c, "command") != nil || !slices.Equal(strs(dig(c, "args")), []string{"rls"}) {
		t.Errorf("container image %v, command %v, args %v: want %s and the image's entrypoint given rls", dig(c, "image"), dig(c, "command"), dig(c, "args"), image)
	}
	env := map[string]string{}
	for _, e := range dig(c, "env").([]any) {
		env[fmt.Sprint(dig(e, "name"))] = fmt.Sprint(dig(e, "value"))
	}
	for name := range env {
		if !slices.ContainsFunc(rlsVars, func(v rlsVar) bool { return v.name == name }) {
			t.Errorf("the container sets %s, which rls does not read (or warns of)", name)
		}
	}
	set, err := envoyrls.SettingsFromEnv(func(k string) string { return env[k] })
	if err != nil || len(set.Ignored) > 0 {
		t.Fatalf("the container's settings: %v, ignored %v", err, set.Ignored)
	}
	// Ports: the container's are the listeners', the probes' the HTTP one's.
	ports := map[string]bool{}
	for _, p := range dig(c, "ports").([]any) {
		ports[fmt.Sprint(dig(p, "containerPort"))] = true
	}
	_, grpcPort, _ := net.SplitHostPort(set.GRPCAddr)
	_, httpPort, _ := net.SplitHostPort(set.HTTPAddr)
	if len(ports) != 2 || !ports[grpcPort] || !ports[httpPort] {
		t.Errorf("container ports %v, but rls listens on %s and %s", ports, set.GRPCAddr, set.HTTPAddr)
	}
	for _, probe := range []string{"readinessProbe", "livenessProbe"} {
		if dig(c, probe, "httpGet", "path") != "/healthcheck" || fmt.Sprint(dig(c, probe, "httpGet", "port")) != httpPort {
			t.Errorf("%s %v, want /healthcheck on %s", probe, dig(c, probe), httpPort)
		}
	}
	svc := m["Service"]
	if fmt.Sprint(dig(svc, "spec", "selector")) != fmt.Sprint(dig(m["Deployment"], "spec", "template", "metadata", "labels")) {
		t.Errorf("the Service selects %v, not the pods", dig(svc, "spec", "selector"))
	}
	svcGRPC := ""
	for _, p := range dig(svc, "spec", "ports").([]any) {
		target := fmt.Sprint(dig(p, "targetPort"))
		if !ports[target] {
			t.Errorf("Service port %v targets no container port", p)
		}
		if target == grpcPort {
			svcGRPC = fmt.Sprint(dig(p, "port"))
			if !strings.HasPrefix(fmt.Sprint(dig(p, "name")), "grpc") {
				t.Errorf("the gRPC port is named %v: Istio takes the protocol from a grpc- name", dig(p, "name"))
			}
		}
	}
	// The configuration: the ConfigMap mounted where rls reads it.
	mount := dig(c, "volumeMounts", 0)
	if dig(mount, "mountPath") != set.ConfigDir || dig(mount, "subPath") != nil || !set.Load.IgnoreDotFiles {
		t.Errorf("mount %v, but rls reads %s (ignoring dot files: %v); a subPath mount is never updated", mount, set.ConfigDir, set.Load.IgnoreDotFiles)
	}
	if dig(pod, "volumes", 0, "name") != dig(mount, "name") || dig(pod, "volumes", 0, "configMap", "name") != dig(m["ConfigMap"], "metadata", "name") {
		t.Errorf("volume %v is not the ConfigMap %v", dig(pod, "volumes", 0), dig(m["ConfigMap"], "metadata", "name"))
	}
	cfg, err := envoyrls.Parse(configMapSources(m), set.Load)
	if err != nil {
		t.Fatalf("the ConfigMap's configuration: %v", err)
	}
	// The EnvoyFilter: the Service's gRPC port, the ConfigMap's domain.
	filter := dig(m["EnvoyFilter"], "spec", "configPatches", 0, "patch", "value", "typed_config")
	cluster := fmt.Sprintf("outbound|%s||%s.default.svc.cluster.local", svcGRPC, dig(svc, "metadata", "name"))
	if got := dig(filter, "rate_limit_service", "grpc_service", "envoy_grpc", "cluster_name"); got != cluster {
		t.Errorf("the EnvoyFilter calls %v, want the Service's gRPC port, %s", got, cluster)
	}
	if d := fmt.Sprint(dig(filter, "domain")); !slices.Contains(cfg.Domains(), d) {
		t.Errorf("the EnvoyFilter's domain %s is not the ConfigMap's %v", d, cfg.Domains())
	}
	action := dig(m["EnvoyFilter"], "spec", "configPatches", 1, "patch", "value", "rate_limits", 0, "actions", 0, "request_headers")
	if dig(action, "descriptor_key") != "PATH" || dig(action, "header_name") != ":path" {
		t.Errorf("the EnvoyFilter's action %v: the ConfigMap limits PATH, the request's :path", action)
	}
	return env
}

// configMapSources are the ConfigMap's files as configuration sources.
func configMapSources(m manifests) []envoyrls.Source {
	var srcs []envoyrls.Source
	for name, data := range dig(m["ConfigMap"], "data").(map[string]any) {
		srcs = append(srcs, envoyrls.Source{Name: name, Data: []byte(fmt.Sprint(data))})
	}
	return srcs
}

// serveIstio runs `tollgate rls` with the Deployment's environment, its
// paths under a directory of the test's (the ConfigMap mounted there as
// the kubelet mounts it), Redis the test's and its listeners on
// loopback, and asks it as the EnvoyFilter makes Envoy ask; then updates
// the ConfigMap as the kubelet does, and sees the new limit served.
func serveIstio(t *testing.T, m manifests, env map[string]string) {
	root := t.TempDir()
	set, _ := envoyrls.SettingsFromEnv(func(k string) string { return env[k] })
	dir := filepath.Join(root, set.ConfigDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{}
	for name, data := range dig(m["ConfigMap"], "data").(map[string]any) {
		files[name] = fmt.Sprint(data)
	}
	cm := configmap.Mount(t, dir, files)
	redis := redistest.Start(t)
	grpcAddr, grpcPort := freeAddr(t)
	httpAddr, httpPort := freeAddr(t)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), rlsEnv+"=1", "TOLLGATE_STORE_TIMEOUT="+testenv.StoreTimeout.String())
	for k, v := range env {
		switch k {
		case "RUNTIME_ROOT":
			v = filepath.Join(root, v)
		case "REDIS_URL":
			v = redis.Addr
		case "HOST", "GRPC_HOST":
			v = "127.0.0.1"
		}
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Env = append(cmd.Env, "GRPC_PORT="+grpcPort, "PORT="+httpPort)
	var logs redistest.SyncBuffer
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		resp, err := http.Get("http://" + httpAddr + "/healthcheck")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no /healthcheck: %v\n%s", err, logs.String())
		}
	}
	if strings.Contains(logs.String(), "setting without effect") {
		t.Errorf("the manifest's settings are warned of:\n%s", logs.String())
	}
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := rlspb.NewRateLimitServiceClient(conn)
	filter := dig(m["EnvoyFilter"], "spec", "configPatches", 0, "patch", "value", "typed_config")
	ask := func(path string, hits uint64) *rlspb.RateLimitResponse {
		t.Helper()
		d := &rlv3.RateLimitDescriptor{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "PATH", Value: path}}, HitsAddend: wrapperspb.UInt64(hits)}
		resp, err := c.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: fmt.Sprint(dig(filter, "domain")), Descriptors: []*rlv3.RateLimitDescriptor{d}})
		if err != nil {
			t.Fatalf("ShouldRateLimit: %v\n%s", err, logs.String())
		}
		return resp
	}
	var codes []string
	for range 2 {
		codes = append(codes, ask("/productpage", 1).OverallCode.String())
	}
	if got := strings.Join(codes, " "); got != "OK OVER_LIMIT" {
		t.Fatalf("/productpage, 1 a minute: %s", got)
	}
	if got := ask("/reviews", 1).OverallCode.String(); got != "OK" {
		t.Fatalf("/reviews, 100 a minute: %s", got)
	}
	files["config.yaml"] = strings.Replace(files["config.yaml"], "requests_per_unit: 1}", "requests_per_unit: 5}", 1)
	cm.Update(t, files)
	for deadline := time.Now().Add(5 * time.Second); ask("/productpage", 0).Statuses[0].GetCurrentLimit().GetRequestsPerUnit() != 5; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the ConfigMap's update not served:\n%s", logs.String())
		}
	}
}

// notRead are variables Envoy Gateway sets that rls neither reads nor
// warns of; the page says so of each.
var notRead = []string{"LOG_LEVEL", "PROMETHEUS_MAPPER_YAML", "REDIS_TLS_CLIENT_CERT", "REDIS_TLS_CLIENT_KEY",
	"GRPC_SERVER_TLS_CA_CERT"}

// envoyGatewayChecks checks the EnvoyGateway configuration: the
// rate-limit Deployment's image is Tollgate's, its container (Envoy
// Gateway's envoy-ratelimit) patched to run the image's entrypoint with
// rls, on Redis; and the variables of the page's table are ones rls
// reads, warns of, or that the page says it does not read.
func envoyGatewayChecks(t *testing.T, m manifests, entrypoint []string, image string) {
	eg := m["EnvoyGateway"]
	rl := dig(eg, "provider", "kubernetes", "rateLimitDeployment")
	if dig(rl, "container", "image") != image {
		t.Errorf("rateLimitDeployment's image %v, want %s", dig(rl, "container", "image"), image)
	}
	c := dig(rl, "patch", "value", "spec", "template", "spec", "containers", 0)
	if dig(rl, "patch", "type") != "StrategicMerge" || dig(c, "name") != "envoy-ratelimit" ||
		!slices.Equal(strs(dig(c, "command")), entrypoint) || !slices.Equal(strs(dig(c, "args")), []string{"rls"}) {
		t.Errorf("rateLimitDeployment's patch %v: want envoy-ratelimit's command the image's entrypoint %v and its args [rls]", dig(rl, "patch"), entrypoint)
	}
	if dig(eg, "rateLimit", "backend", "type") != "Redis" || dig(eg, "rateLimit", "backend", "redis", "url") == nil {
		t.Errorf("rateLimit %v: want a Redis backend", dig(eg, "rateLimit"))
	}
	b, err := os.ReadFile(filepath.Join("..", "..", integrationsPage))
	if err != nil {
		t.Fatal(err)
	}
	_, table, _ := strings.Cut(string(b), "| Envoy Gateway sets | Tollgate |")
	table, _, _ = strings.Cut(table, "\n\n")
	known := slices.Concat(rlsIgnored, notRead)
	for _, v := range rlsVars {
		known = append(known, v.name)
	}
	names := regexp.MustCompile("`([A-Z][A-Z0-9_]+)[`=]").FindAllStringSubmatch(table, -1)
	if len(names) < 20 {
		t.Fatalf("the Envoy Gateway table names %d variables", len(names))
	}
	for _, n := range names {
		if !slices.Contains(known, n[1]) {
			t.Errorf("the Envoy Gateway table names %s, which rls neither reads nor warns of", n[1])
		}
	}
	for _, n := range notRead {
		if !strings.Contains(table, "`"+n+"`") {
			t.Errorf("the Envoy Gateway table does not say %s is not read", n)
		}
	}
}
