package envoyrls_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/tollgate/tollgate/envoyrls"
)

// TestServerTLSSettings: GRPC_SERVER_USE_TLS takes envoyproxy/ratelimit's
// variables, and a setting that would leave the listener other than
// asked is an error.
func TestServerTLSSettings(t *testing.T) {
	for _, c := range []struct {
		name, reason string
		env          map[string]string
		want         *envoyrls.ServerTLS // nil: no TLS
		fails        bool
	}{
		{name: "none", reason: "plaintext by default", env: map[string]string{}},
		{name: "server", reason: "a certificate and its key", env: map[string]string{"GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": "c.pem", "GRPC_SERVER_TLS_KEY": "k.pem"},
			want: &envoyrls.ServerTLS{Cert: "c.pem", Key: "k.pem"}},
		{name: "mutual", reason: "a client CA and a name it must hold", env: map[string]string{"GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": "c.pem", "GRPC_SERVER_TLS_KEY": "k.pem",
			"GRPC_CLIENT_TLS_CACERT": "ca.pem", "GRPC_CLIENT_TLS_SAN": "envoy"}, want: &envoyrls.ServerTLS{Cert: "c.pem", Key: "k.pem", ClientCA: "ca.pem", ClientSAN: "envoy"}},
		{name: "no key", reason: "TLS without a key cannot serve", env: map[string]string{"GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": "c.pem"}, fails: true},
		{name: "files without TLS", reason: "a certificate given without GRPC_SERVER_USE_TLS would leave the listener plaintext unnoticed",
			env: map[string]string{"GRPC_SERVER_TLS_CERT": "c.pem", "GRPC_SERVER_TLS_KEY": "k.pem"}, fails: true},
		{name: "SAN without CA", reason: "no client certificate is asked for without a CA, so its name cannot be checked",
			env: map[string]string{"GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": "c.pem", "GRPC_SERVER_TLS_KEY": "k.pem", "GRPC_CLIENT_TLS_SAN": "envoy"}, fails: true},
		{name: "not a boolean", reason: "GRPC_SERVER_USE_TLS is true or false", env: map[string]string{"GRPC_SERVER_USE_TLS": "yes please"}, fails: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, err := envoyrls.SettingsFromEnv(func(k string) string { return c.env[k] })
			switch {
			case c.fails:
				if err == nil {
					t.Fatalf("read without an error: %s", c.reason)
				}
			case err != nil:
				t.Fatalf("%v: %s", err, c.reason)
			case (s.TLS == nil) != (c.want == nil) || s.TLS != nil && *s.TLS != *c.want:
				t.Fatalf("TLS %+v, want %+v: %s", s.TLS, c.want, c.reason)
			}
		})
	}
}

// TestServerTLS: the rate-limit service served over TLS answers a client
// that trusts its CA; with a client CA, only a client presenting a
// certificate it signed, and with a SAN only one naming it; a rotated
// certificate is served from the next connection on, and one rotated
// into something unreadable leaves the last good one served.
func TestServerTLS(t *testing.T) {
	p := newPKI(t)
	f := newFixture(t, "memory", fixtureOptions{files: map[string]string{"r.yaml": "domain: r\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 5}\n"}})
	clientPair, err := tls.LoadX509KeyPair(p.clientCert, p.clientKey)
	if err != nil {
		t.Fatal(err)
	}
	trusting := &tls.Config{RootCAs: p.pool, ServerName: "xds.test"}
	withCert := &tls.Config{RootCAs: p.pool, ServerName: "xds.test", Certificates: []tls.Certificate{clientPair}}
	serve := func(t *testing.T, s envoyrls.ServerTLS) (string, *[]error) {
		var warned []error
		tc, err := s.Config(func(err error) { warned = append(warned, err) })
		if err != nil {
			t.Fatal(err)
		}
		g := grpc.NewServer(grpc.Creds(credentials.NewTLS(tc)))
		f.srv.Register(g)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go g.Serve(ln)
		t.Cleanup(g.Stop)
		return ln.Addr().String(), &warned
	}
	ask := func(addr string, creds credentials.TransportCredentials) error {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
		if err != nil {
			return err
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err = rlspb.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: "r",
			Descriptors: []*rlv3.RateLimitDescriptor{{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}}})
		return err
	}
	for _, c := range []struct {
		name, reason string
		server       envoyrls.ServerTLS
		client       credentials.TransportCredentials
		ok           bool
	}{
		{name: "tls", reason: "a client trusting the CA is answered", server: envoyrls.ServerTLS{Cert: p.serverCert, Key: p.serverKey},
			client: credentials.NewTLS(trusting), ok: true},
		{name: "plaintext client", reason: "a TLS listener does not answer plaintext", server: envoyrls.ServerTLS{Cert: p.serverCert, Key: p.serverKey},
			client: insecure.NewCredentials()},
		{name: "mutual", reason: "a client certificate the client CA signed is taken", server: envoyrls.ServerTLS{Cert: p.serverCert, Key: p.serverKey, ClientCA: p.caFile},
			client: credentials.NewTLS(withCert), ok: true},
		{name: "mutual, no certificate", reason: "with a client CA a client must present a certificate", server: envoyrls.ServerTLS{Cert: p.serverCert, Key: p.serverKey, ClientCA: p.caFile},
			client: credentials.NewTLS(trusting)},
		{name: "SAN", reason: "the client certificate names client.test", server: envoyrls.ServerTLS{Cert: p.serverCert, Key: p.serverKey, ClientCA: p.caFile, ClientSAN: "client.test"},
			client: credentials.NewTLS(withCert), ok: true},
		{name: "other SAN", reason: "a client certificate that does not name GRPC_CLIENT_TLS_SAN is refused", server: envoyrls.ServerTLS{Cert: p.serverCert, Key: p.serverKey, ClientCA: p.caFile, ClientSAN: "envoy.test"},
			client: credentials.NewTLS(withCert)},
	} {
		t.Run(c.name, func(t *testing.T) {
			addr, _ := serve(t, c.server)
			if err := ask(addr, c.client); (err == nil) != c.ok {
				t.Fatalf("ShouldRateLimit: %v, want ok %v: %s", err, c.ok, c.reason)
			}
		})
	}

	t.Run("rotation", func(t *testing.T) {
		addr, warned := serve(t, envoyrls.ServerTLS{Cert: p.serverCert, Key: p.serverKey})
		served := func() *big.Int {
			conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: p.pool, ServerName: "xds.test", NextProtos: []string{"h2"}})
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			return conn.ConnectionState().PeerCertificates[0].SerialNumber
		}
		if got := served(); got.Int64() != 2 {
			t.Fatalf("serial %v, want the first certificate's 2", got)
		}
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: "rotated"}, DNSNames: []string{"xds.test"}, NotBefore: time.Now().Add(-time.Hour),
			NotAfter: time.Now().Add(time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, KeyUsage: x509.KeyUsageDigitalSignature}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &key.PublicKey, p.caKey)
		if err != nil {
			t.Fatal(err)
		}
		future := time.Now().Add(time.Minute) // a modification time the first files did not have
		writePair(t, p.serverCert, p.serverKey, der, key)
		touch(t, future, p.serverCert, p.serverKey)
		if got := served(); got.Int64() != 7 {
			t.Fatalf("serial %v after rotation, want the new certificate's 7", got)
		}
		writePEM(t, p.serverKey, "EC PRIVATE KEY", []byte("not a key"))
		touch(t, future.Add(time.Minute), p.serverKey)
		if got := served(); got.Int64() != 7 {
			t.Fatalf("serial %v after an unreadable rotation, want the last good certificate's 7", got)
		}
		if len(*warned) == 0 || !strings.Contains((*warned)[0].Error(), "GRPC_SERVER_TLS_CERT") {
			t.Fatalf("an unreadable certificate warned %v", *warned)
		}
	})
}

// touch sets the files' modification time to at.
func touch(t *testing.T, at time.Time, files ...string) {
	t.Helper()
	for _, f := range files {
		if err := os.Chtimes(f, at, at); err != nil {
			t.Fatal(err)
		}
	}
}
