package envoyrls_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	rlsconfpb "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/tollgate/tollgate/envoyrls"
	"github.com/tollgate/tollgate/internal/xdstest"
)

const xdsNode = "tollgate-test"

// rlConfig is a RateLimitConfig resource.
func rlConfig(name, domain string, ds ...*rlsconfpb.RateLimitDescriptor) *rlsconfpb.RateLimitConfig {
	return &rlsconfpb.RateLimitConfig{Name: name, Domain: domain, Descriptors: ds}
}

// limited is a descriptor of key with a limit of n a unit.
func limited(key string, n uint32, unit rlsconfpb.RateLimitUnit) *rlsconfpb.RateLimitDescriptor {
	return &rlsconfpb.RateLimitDescriptor{Key: key, RateLimit: &rlsconfpb.RateLimitPolicy{Unit: unit, RequestsPerUnit: n}}
}

func perMinute(key string, n uint32) *rlsconfpb.RateLimitDescriptor {
	return limited(key, n, rlsconfpb.RateLimitUnit_MINUTE)
}

// xdsFixture is a service without configuration, which watches cp.
func xdsFixture(t *testing.T, cp *xdstest.ControlPlane) (*fixture, <-chan struct{}) {
	t.Helper()
	f := newFixture(t, "memory", fixtureOptions{files: map[string]string{}})
	ready, err := f.srv.WatchXDS(t.Context(), envoyrls.XDSOptions{ServerURL: cp.Addr, Node: &corev3.Node{Id: cp.NodeID},
		RetryInterval: 20 * time.Millisecond, MaxRetryInterval: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return f, ready
}

// awaitReady waits for the first configuration from xDS.
func awaitReady(t *testing.T, ready <-chan struct{}) {
	t.Helper()
	select {
	case <-ready:
	case <-time.After(10 * time.Second):
		t.Fatal("no configuration from xDS")
	}
}

// limitOf is the limit the service has for the descriptor key of domain
// (0: none), asked without charging it.
func limitOf(t *testing.T, f *fixture, domain, key string) uint32 {
	return f.ask(t, domain, 0, withHits(desc(key, "x"), 0)).Statuses[0].GetCurrentLimit().GetRequestsPerUnit()
}

// awaitLimit waits until the service's limit of the descriptor key of
// domain is want.
func awaitLimit(t *testing.T, f *fixture, domain, key string, want uint32) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for limitOf(t, f, domain, key) != want {
		if time.Now().After(deadline) {
			t.Fatalf("%s.%s: limit %d, want %d", domain, key, limitOf(t, f, domain, key), want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// charge charges the descriptor key of domain one hit and returns what
// remains of its limit.
func charge(t *testing.T, f *fixture, domain, key string) uint32 {
	t.Helper()
	resp := f.ask(t, domain, 1, desc(key, "x"))
	if resp.OverallCode != rlspb.RateLimitResponse_OK {
		t.Fatalf("%s.%s: %v", domain, key, resp)
	}
	return resp.Statuses[0].LimitRemaining
}

func awaitRequests(t *testing.T, cp *xdstest.ControlPlane, what string, cond func([]xdstest.Request) bool) {
	t.Helper()
	if !cp.Await(10*time.Second, cond) {
		reqs, _ := cp.Requests()
		t.Fatalf("the control plane never received %s; it received %+v", what, reqs)
	}
}

func TestRateLimitConfigType(t *testing.T) {
	if envoyrls.RateLimitConfigType != resourcev3.RateLimitConfigType {
		t.Fatalf("%s, want go-control-plane's %s", envoyrls.RateLimitConfigType, resourcev3.RateLimitConfigType)
	}
}

// TestXDSLoadsAndUpdates: the control plane's first snapshot is served
// and acknowledged, then an update, all its resources at once; a
// descriptor that did not change keeps counting across it; the metrics
// count the loads and name the version served.
func TestXDSLoadsAndUpdates(t *testing.T) {
	cp := xdstest.Start(t, "127.0.0.1:0", xdsNode)
	cp.Set(t, "1", rlConfig("a", "d", perMinute("k", 5), perMinute("other", 3)))
	f, ready := xdsFixture(t, cp)
	awaitReady(t, ready)
	if got := charge(t, f, "d", "k"); got != 4 {
		t.Fatalf("first load: %d remain, want 4", got)
	}
	awaitRequests(t, cp, "the acknowledgement of 1", func([]xdstest.Request) bool { return cp.Acknowledged("1") })
	if got := testutilCounter(f.metrics.XDSConfig.WithLabelValues("1")); got != 1 {
		t.Fatalf("version 1 is served, the metric says %v", got)
	}

	cp.Set(t, "2", rlConfig("a", "d", perMinute("k", 5), perMinute("other", 7)), rlConfig("b", "e", perMinute("k", 1)))
	awaitLimit(t, f, "d", "other", 7)
	if got := limitOf(t, f, "e", "k"); got != 1 {
		t.Fatalf("the second resource of the update is not served with the first: limit %d", got)
	}
	if got := charge(t, f, "d", "k"); got != 3 {
		t.Fatalf("after the update: %d remain, want 3 (d.k did not change, so its count goes on)", got)
	}
	awaitRequests(t, cp, "the acknowledgement of 2", func([]xdstest.Request) bool { return cp.Acknowledged("2") })
	if n, v := testutil.CollectAndCount(f.metrics.XDSConfig), testutilCounter(f.metrics.XDSConfig.WithLabelValues("2")); n != 1 || v != 1 {
		t.Fatalf("version 2 served: %d series, version 2's %v", n, v)
	}
	if got := testutilCounter(f.metrics.ConfigLoads.WithLabelValues("success")); got != 2 {
		t.Fatalf("%v successful loads, want 2", got)
	}
	if files := f.srv.Config().Files; !slices.Equal(files, []string{`RateLimitConfig "a"`, `RateLimitConfig "b"`}) {
		t.Fatalf("the configuration's sources: %q", files)
	}
}

// TestXDSRefusesInvalid: an invalid snapshot is refused to the control
// plane with the reason, as the version last served; it is counted once,
// however often the control plane sends it again, and the configuration
// served keeps deciding until a valid one comes.
func TestXDSRefusesInvalid(t *testing.T) {
	cp := xdstest.Start(t, "127.0.0.1:0", xdsNode)
	cp.Set(t, "1", rlConfig("a", "d", perMinute("k", 10)))
	f, ready := xdsFixture(t, cp)
	awaitReady(t, ready)
	remaining := charge(t, f, "d", "k")
	cases := []struct {
		reason  string
		configs []*rlsconfpb.RateLimitConfig
		want    string
	}{
		{"a limit needs a unit", []*rlsconfpb.RateLimitConfig{rlConfig("a", "d", limited("k", 10, rlsconfpb.RateLimitUnit_UNKNOWN))},
			`RateLimitConfig "a": invalid rate limit unit 'UNKNOWN'`},
		{"a domain is configured once (no MERGE_DOMAIN_CONFIG)", []*rlsconfpb.RateLimitConfig{rlConfig("a", "d"), rlConfig("b", "d")},
			`RateLimitConfig "b": duplicate domain 'd'`},
		{"a resource names its domain", []*rlsconfpb.RateLimitConfig{rlConfig("a", "")}, "cannot have empty domain"},
		{"a descriptor is configured once", []*rlsconfpb.RateLimitConfig{rlConfig("a", "d", perMinute("k", 1), perMinute("k", 2))},
			"duplicate descriptor composite key 'd.k'"},
	}
	for i, c := range cases {
		version := "bad-" + strconv.Itoa(i)
		cp.Set(t, version, c.configs...)
		awaitRequests(t, cp, "the refusal of "+version, func(reqs []xdstest.Request) bool {
			return slices.ContainsFunc(reqs, func(r xdstest.Request) bool { return strings.Contains(r.Error, `"`+version+`"`) })
		})
		for _, r := range cp.Refusals() {
			if strings.Contains(r.Error, `"`+version+`"`) && (!strings.Contains(r.Error, c.want) || r.Version != "1") {
				t.Fatalf("%s: refused as version %q with %q, want version 1 and %q", c.reason, r.Version, r.Error, c.want)
			}
		}
		if got := charge(t, f, "d", "k"); got != remaining-1 || limitOf(t, f, "d", "k") != 10 {
			t.Fatalf("%s: after the refusal %d remain of %d, want %d of 10", c.reason, got, limitOf(t, f, "d", "k"), remaining-1)
		}
		remaining--
	}
	// The snapshot cache sends the refused snapshot again after each
	// refusal: it is refused again, not read nor counted again.
	last := "bad-" + strconv.Itoa(len(cases)-1)
	awaitRequests(t, cp, "three refusals of "+last, func(reqs []xdstest.Request) bool {
		n := 0
		for _, r := range reqs {
			if strings.Contains(r.Error, `"`+last+`"`) {
				n++
			}
		}
		return n >= 3
	})
	if got := testutilCounter(f.metrics.ConfigLoads.WithLabelValues("error")); got != float64(len(cases)) {
		t.Fatalf("%v loads refused, want %d", got, len(cases))
	}
	if got := testutilCounter(f.metrics.XDSConfig.WithLabelValues("1")); got != 1 {
		t.Fatalf("the version served is 1, the metric says %v", got)
	}
	cp.Set(t, "2", rlConfig("a", "d", perMinute("k", 10), perMinute("new", 2)))
	awaitLimit(t, f, "d", "new", 2)
	if got := charge(t, f, "d", "k"); got != remaining-1 {
		t.Fatalf("after a valid update: %d remain, want %d", got, remaining-1)
	}
}

// TestXDSControlPlaneRestarts: while the control plane is gone the last
// configuration keeps deciding; the service connects again to a new one
// on the same address, telling it the version it has, and serves its
// snapshot, the counts of unchanged descriptors going on.
func TestXDSControlPlaneRestarts(t *testing.T) {
	cp := xdstest.Start(t, "127.0.0.1:0", xdsNode)
	cp.Set(t, "1", rlConfig("a", "d", perMinute("k", 10)))
	f, ready := xdsFixture(t, cp)
	awaitReady(t, ready)
	awaitRequests(t, cp, "the acknowledgement of 1", func([]xdstest.Request) bool { return cp.Acknowledged("1") })
	cp.Stop()
	for want := uint32(9); want >= 7; want-- {
		if got := charge(t, f, "d", "k"); got != want {
			t.Fatalf("the control plane gone: %d remain, want %d", got, want)
		}
	}

	cp2 := xdstest.Start(t, cp.Addr, xdsNode)
	awaitRequests(t, cp2, "a request for what it has", func(reqs []xdstest.Request) bool {
		return slices.ContainsFunc(reqs, func(r xdstest.Request) bool {
			return r.Nonce == "" && r.Version == "1" && r.Node == xdsNode && r.TypeURL == envoyrls.RateLimitConfigType
		})
	})
	if got := charge(t, f, "d", "k"); got != 6 {
		t.Fatalf("a control plane without a snapshot: %d remain, want 6", got)
	}
	cp2.Set(t, "2", rlConfig("a", "d", perMinute("k", 10), perMinute("new", 2)))
	awaitLimit(t, f, "d", "new", 2)
	if got := charge(t, f, "d", "k"); got != 5 {
		t.Fatalf("the new control plane's snapshot: %d remain, want 5", got)
	}
}

// TestXDSUpdatesUnderLoad: 10 updates a second for 3 seconds while
// decisions run: none fails, each is decided under one version and no
// older than the last its caller saw, and every hit of the descriptor
// that did not change is counted.
func TestXDSUpdatesUnderLoad(t *testing.T) {
	const stableLimit, updates = 1_000_000, 30
	config := func(i int) *rlsconfpb.RateLimitConfig {
		return rlConfig("a", "d", limited("stable", stableLimit, rlsconfpb.RateLimitUnit_HOUR), perMinute("moving", uint32(100+i)))
	}
	cp := xdstest.Start(t, "127.0.0.1:0", xdsNode)
	cp.Set(t, "0", config(0))
	f, ready := xdsFixture(t, cp)
	awaitReady(t, ready)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var sent int
	var errs []string
	for range 4 {
		wg.Go(func() {
			req := &rlspb.RateLimitRequest{Domain: "d", HitsAddend: 1, Descriptors: []*rlv3Descriptor{desc("stable", "x"), withHits(desc("moving", "x"), 0)}}
			seen, n := uint32(100), 0
			defer func() { mu.Lock(); sent += n; mu.Unlock() }()
			for i := 0; i < 100_000; i++ {
				select {
				case <-stop:
					return
				default:
				}
				resp, err := f.client.ShouldRateLimit(context.Background(), req)
				var limit uint32
				if err == nil && resp.OverallCode == rlspb.RateLimitResponse_OK && len(resp.Statuses) == 2 {
					n++
					limit = resp.Statuses[1].GetCurrentLimit().GetRequestsPerUnit()
				}
				if limit < seen || limit > 100+updates {
					mu.Lock()
					errs = append(errs, fmt.Sprintf("decision %d, after version %d: %v, %v", i, seen-100, resp, err))
					mu.Unlock()
					return
				}
				seen = limit
			}
		})
	}
	tick := time.NewTicker(100 * time.Millisecond)
	for i := 1; i <= updates; i++ {
		<-tick.C
		cp.Set(t, strconv.Itoa(i), config(i))
	}
	tick.Stop()
	awaitLimit(t, f, "d", "moving", 100+updates)
	close(stop)
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d callers failed: %s", len(errs), strings.Join(errs, "\n"))
	}
	left := f.ask(t, "d", 0, withHits(desc("stable", "x"), 0)).Statuses[0].LimitRemaining
	if sent == 0 || left != stableLimit-uint32(sent) {
		t.Fatalf("%d hits admitted, %d of %d remain: some were not counted", sent, left, stableLimit)
	}
	if got := testutilCounter(f.metrics.ConfigLoads.WithLabelValues("error")); got != 0 {
		t.Fatalf("%v loads refused", got)
	}
	t.Logf("%d decisions over %d updates, %v loads", sent, updates, testutilCounter(f.metrics.ConfigLoads.WithLabelValues("success")))
}

// TestXDSSettings reads the xDS settings as envoyproxy/ratelimit does,
// with its defaults, and refuses what it cannot read.
func TestXDSSettings(t *testing.T) {
	env := func(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }
	s, err := envoyrls.SettingsFromEnv(env(map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW"}))
	want := envoyrls.XDSSettings{ServerURL: "localhost:18000", NodeID: "default", RetryInterval: 3 * time.Second, MaxRetryInterval: time.Minute, Jitter: true}
	if err != nil || s.ConfigType != "GRPC_XDS_SOTW" || s.XDS == nil || !equalXDS(*s.XDS, want) {
		t.Fatalf("defaults: %+v, %v", s.XDS, err)
	}
	if s, err := envoyrls.SettingsFromEnv(env(nil)); err != nil || s.ConfigType != "FILE" || s.XDS != nil {
		t.Fatalf("FILE is the default: %+v, %v", s, err)
	}
	s, err = envoyrls.SettingsFromEnv(env(map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL": "envoy-gateway:18001",
		"CONFIG_GRPC_XDS_NODE_ID": "envoy-ratelimit", "CONFIG_GRPC_XDS_NODE_METADATA": "zone=a,team=b", "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS": "x-token:s3cr3t",
		"CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL": "1s", "XDS_CLIENT_BACKOFF_MAX_INTERVAL": "10s", "XDS_CLIENT_BACKOFF_JITTER": "false",
		"XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES": "8388608", "FORCE_START_WITHOUT_INITIAL_CONFIG": "true", "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL": "10s"}))
	want = envoyrls.XDSSettings{ServerURL: "envoy-gateway:18001", NodeID: "envoy-ratelimit", NodeMetadata: map[string]string{"zone": "a", "team": "b"},
		Headers: map[string]string{"x-token": "s3cr3t"}, RetryInterval: time.Second, MaxRetryInterval: 10 * time.Second, MaxMsgSize: 8 << 20, ForceStart: true}
	if err != nil || !equalXDS(*s.XDS, want) || len(s.Ignored) != 1 || !strings.HasPrefix(s.Ignored[0], "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL") {
		t.Fatalf("set: %+v, %v, ignored %q", s.XDS, err, s.Ignored)
	}
	for _, c := range []struct {
		env    map[string]string
		reason string
	}{
		{map[string]string{"CONFIG_TYPE": "GRPC_XDS_DELTA"}, "only state of the world is served"},
		{map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_NODE_METADATA": "zone:a"}, "metadata is key=value"},
		{map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS": "x-token"}, "a header is name:value"},
		{map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL": "3"}, "an interval is a duration"},
		{map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES": "4MB"}, "a size is a number of bytes"},
		{map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_USE_TLS": "true", "CONFIG_GRPC_XDS_CLIENT_TLS_CERT": "c.pem"}, "a certificate without its key"},
	} {
		if _, err := envoyrls.SettingsFromEnv(env(c.env)); err == nil {
			t.Errorf("%s: %v read without an error", c.reason, c.env)
		}
	}
}

func equalXDS(a, b envoyrls.XDSSettings) bool {
	return a.ServerURL == b.ServerURL && a.NodeID == b.NodeID && equalMaps(a.NodeMetadata, b.NodeMetadata) && equalMaps(a.Headers, b.Headers) &&
		a.RetryInterval == b.RetryInterval && a.MaxRetryInterval == b.MaxRetryInterval && a.Jitter == b.Jitter && a.UseTLS == b.UseTLS &&
		a.ClientCert == b.ClientCert && a.ClientKey == b.ClientKey && a.CACert == b.CACert && a.SAN == b.SAN && a.MaxMsgSize == b.MaxMsgSize && a.ForceStart == b.ForceStart
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// TestXDSMutualTLS: with CONFIG_GRPC_XDS_SERVER_USE_TLS the service
// connects as Envoy Gateway's ratelimit does, with a client certificate
// the control plane requires, trusting the CA given and checking the
// server's name is CONFIG_GRPC_XDS_SERVER_TLS_SAN; TLS files that cannot
// be read are reported.
func TestXDSMutualTLS(t *testing.T) {
	pki := newPKI(t)
	serverTLS := &tls.Config{Certificates: []tls.Certificate{pki.server}, ClientCAs: pki.pool, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12}
	cp := xdstest.Start(t, "127.0.0.1:0", xdsNode, grpc.Creds(credentials.NewTLS(serverTLS)))
	cp.Set(t, "1", rlConfig("a", "d", perMinute("k", 5)))
	env := map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL": cp.Addr, "CONFIG_GRPC_XDS_NODE_ID": xdsNode,
		"CONFIG_GRPC_XDS_SERVER_USE_TLS": "true", "CONFIG_GRPC_XDS_CLIENT_TLS_CERT": pki.clientCert, "CONFIG_GRPC_XDS_CLIENT_TLS_KEY": pki.clientKey,
		"CONFIG_GRPC_XDS_SERVER_TLS_CACERT": pki.caFile, "CONFIG_GRPC_XDS_SERVER_TLS_SAN": "xds.test", "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL": "20ms"}
	set, err := envoyrls.SettingsFromEnv(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	opts, err := set.XDS.Options(set.Load)
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, "memory", fixtureOptions{files: map[string]string{}})
	ready, err := f.srv.WatchXDS(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	awaitReady(t, ready)
	if got := limitOf(t, f, "d", "k"); got != 5 {
		t.Fatalf("over mutual TLS: limit %d", got)
	}

	notPEM := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		set    envoyrls.XDSSettings
		reason string
	}{
		{envoyrls.XDSSettings{UseTLS: true, CACert: notPEM}, "a CA file without a certificate"},
		{envoyrls.XDSSettings{UseTLS: true, CACert: notPEM + ".missing"}, "a CA file missing"},
		{envoyrls.XDSSettings{UseTLS: true, ClientCert: pki.clientCert, ClientKey: pki.caFile}, "a key file that holds no key"},
	} {
		if _, err := c.set.Options(envoyrls.LoadOptions{}); err == nil {
			t.Errorf("%s: no error", c.reason)
		}
	}
}

// pki is a CA, a server certificate it signed for xds.test, and a client
// certificate and key it signed, in files.
type pki struct {
	pool                          *x509.CertPool
	server                        tls.Certificate
	caFile, clientCert, clientKey string
	// serverCert and serverKey hold server's chain and key; the client
	// certificate names client.test.
	serverCert, serverKey string
	ca                    *x509.Certificate
	caKey                 *ecdsa.PrivateKey
}

func newPKI(t *testing.T) pki {
	t.Helper()
	dir := t.TempDir()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	p := pki{pool: x509.NewCertPool(), caFile: filepath.Join(dir, "ca.crt"), clientCert: filepath.Join(dir, "tls.crt"), clientKey: filepath.Join(dir, "tls.key"),
		serverCert: filepath.Join(dir, "server.crt"), serverKey: filepath.Join(dir, "server.key"), ca: ca, caKey: caKey}
	p.pool.AddCert(ca)
	writePEM(t, p.caFile, "CERTIFICATE", caDER)
	leaf := func(serial int64, usage x509.ExtKeyUsage, dns []string) ([]byte, *ecdsa.PrivateKey) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "leaf"}, DNSNames: dns, NotBefore: time.Now().Add(-time.Hour),
			NotAfter: time.Now().Add(time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{usage}, KeyUsage: x509.KeyUsageDigitalSignature}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		return der, key
	}
	serverDER, serverKey := leaf(2, x509.ExtKeyUsageServerAuth, []string{"xds.test"})
	p.server = tls.Certificate{Certificate: [][]byte{serverDER}, PrivateKey: serverKey}
	writePair(t, p.serverCert, p.serverKey, serverDER, serverKey)
	clientDER, clientKey := leaf(3, x509.ExtKeyUsageClientAuth, []string{"client.test"})
	writePair(t, p.clientCert, p.clientKey, clientDER, clientKey)
	return p
}

// writePair writes a certificate and its key in PEM.
func writePair(t *testing.T, certFile, keyFile string, der []byte, key *ecdsa.PrivateKey) {
	t.Helper()
	writePEM(t, certFile, "CERTIFICATE", der)
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, keyFile, "EC PRIVATE KEY", keyDER)
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}
