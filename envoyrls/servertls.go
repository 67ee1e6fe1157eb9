package envoyrls

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"
)

// ServerTLS is the TLS of the gRPC listener, under envoyproxy/ratelimit's
// names: GRPC_SERVER_USE_TLS turns it on, with the certificate chain and
// key of GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY. With
// GRPC_CLIENT_TLS_CACERT a client must present a certificate that CA
// signed (mutual TLS), and with GRPC_CLIENT_TLS_SAN one whose subject
// alternative names include that name.
type ServerTLS struct {
	Cert, Key, ClientCA, ClientSAN string
}

// readServerTLS reads the listener's TLS settings: nil without
// GRPC_SERVER_USE_TLS.
func readServerTLS(e *envReader) *ServerTLS {
	if !e.boolean("GRPC_SERVER_USE_TLS", false) {
		for _, name := range []string{"GRPC_SERVER_TLS_CERT", "GRPC_SERVER_TLS_KEY", "GRPC_CLIENT_TLS_CACERT", "GRPC_CLIENT_TLS_SAN"} {
			if e.getenv(name) != "" {
				e.failf("%s is set without GRPC_SERVER_USE_TLS=true: the listener would be plaintext", name)
			}
		}
		return nil
	}
	s := &ServerTLS{Cert: e.get("GRPC_SERVER_TLS_CERT", ""), Key: e.get("GRPC_SERVER_TLS_KEY", ""),
		ClientCA: e.get("GRPC_CLIENT_TLS_CACERT", ""), ClientSAN: e.get("GRPC_CLIENT_TLS_SAN", "")}
	if s.Cert == "" || s.Key == "" {
		e.failf("GRPC_SERVER_USE_TLS=true needs GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY")
	}
	if s.ClientSAN != "" && s.ClientCA == "" {
		e.failf("GRPC_CLIENT_TLS_SAN needs GRPC_CLIENT_TLS_CACERT: without it no client certificate is asked for")
	}
	return s
}

// Config returns the listener's TLS configuration. Its certificate is
// read again when its files change (a Kubernetes Secret rotated in
// place), at the next handshake after; one that cannot be read then is
// logged through warn and the last good one kept.
func (s *ServerTLS) Config(warn func(error)) (*tls.Config, error) {
	r := &certFiles{cert: s.Cert, key: s.Key, warn: warn}
	if err := r.load(); err != nil {
		return nil, err
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: r.get}
	if s.ClientCA == "" {
		return c, nil
	}
	pem, err := os.ReadFile(s.ClientCA)
	if err != nil {
		return nil, fmt.Errorf("reading GRPC_CLIENT_TLS_CACERT: %w", err)
	}
	c.ClientCAs = x509.NewCertPool()
	if !c.ClientCAs.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("reading GRPC_CLIENT_TLS_CACERT: %s holds no PEM certificate", s.ClientCA)
	}
	c.ClientAuth = tls.RequireAndVerifyClientCert
	if s.ClientSAN != "" {
		c.VerifyPeerCertificate = func(_ [][]byte, chains [][]*x509.Certificate) error {
			if len(chains) == 0 || !hasSAN(chains[0][0], s.ClientSAN) {
				return fmt.Errorf("the client certificate does not name %q (GRPC_CLIENT_TLS_SAN)", s.ClientSAN)
			}
			return nil
		}
	}
	return c, nil
}

// hasSAN reports whether cert names san among its subject alternative
// names: a DNS name, an IP address, a URI or an e-mail address.
func hasSAN(cert *x509.Certificate, san string) bool {
	if slices.Contains(cert.DNSNames, san) || slices.Contains(cert.EmailAddresses, san) {
		return true
	}
	for _, ip := range cert.IPAddresses {
		if ip.String() == san {
			return true
		}
	}
	for _, u := range cert.URIs {
		if u.String() == san {
			return true
		}
	}
	return false
}

// certFiles is a certificate read from its files, again once they
// change.
type certFiles struct {
	cert, key string
	warn      func(error)

	mu       sync.Mutex
	pair     *tls.Certificate
	modified [2]time.Time // of the files when last read
}

func (r *certFiles) stat() ([2]time.Time, error) {
	var m [2]time.Time
	for i, f := range []string{r.cert, r.key} {
		fi, err := os.Stat(f)
		if err != nil {
			return m, err
		}
		m[i] = fi.ModTime()
	}
	return m, nil
}

// load reads the certificate if its files changed since it last did.
func (r *certFiles) load() error {
	m, err := r.stat()
	if err == nil && r.pair != nil && m == r.modified {
		return nil
	}
	if err == nil {
		var pair tls.Certificate
		if pair, err = tls.LoadX509KeyPair(r.cert, r.key); err == nil {
			r.pair, r.modified = &pair, m
			return nil
		}
	}
	return fmt.Errorf("reading GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY: %w", err)
}

func (r *certFiles) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.load(); err != nil {
		if r.warn != nil {
			r.warn(fmt.Errorf("%w; the certificate read before is served", err))
		}
	}
	if r.pair == nil {
		return nil, errors.New("no certificate")
	}
	return r.pair, nil
}
