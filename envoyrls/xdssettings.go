package envoyrls

import (
	"cmp"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/types/known/structpb"
)

// XDSSettings are the settings of CONFIG_TYPE=GRPC_XDS_SOTW, under
// envoyproxy/ratelimit's names.
type XDSSettings struct {
	// ServerURL is CONFIG_GRPC_XDS_SERVER_URL; NodeID and NodeMetadata
	// are CONFIG_GRPC_XDS_NODE_ID and CONFIG_GRPC_XDS_NODE_METADATA
	// ("key=value,key=value").
	ServerURL, NodeID string
	NodeMetadata      map[string]string
	// Headers are CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS
	// ("name:value,name:value").
	Headers map[string]string
	// RetryInterval is CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL,
	// MaxRetryInterval XDS_CLIENT_BACKOFF_MAX_INTERVAL, Jitter
	// XDS_CLIENT_BACKOFF_JITTER (see XDSOptions.RetryInterval).
	RetryInterval, MaxRetryInterval time.Duration
	Jitter                          bool
	// UseTLS (CONFIG_GRPC_XDS_SERVER_USE_TLS) connects over TLS, with
	// the client certificate and key of CONFIG_GRPC_XDS_CLIENT_TLS_CERT
	// and CONFIG_GRPC_XDS_CLIENT_TLS_KEY if set, trusting the system's
	// roots and CONFIG_GRPC_XDS_SERVER_TLS_CACERT's, and checking the
	// server's name is CONFIG_GRPC_XDS_SERVER_TLS_SAN if set (else the
	// URL's host).
	UseTLS                             bool
	ClientCert, ClientKey, CACert, SAN string
	// MaxMsgSize is XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES, the largest
	// response taken (0: gRPC's 4 MiB).
	MaxMsgSize int
	// ForceStart (FORCE_START_WITHOUT_INITIAL_CONFIG) serves before the
	// first configuration arrives; otherwise the service waits for it.
	ForceStart bool
}

// readConfigType reads CONFIG_TYPE and, for GRPC_XDS_SOTW, the xDS
// settings.
func (s *Settings) readConfigType(e *envReader) {
	s.ConfigType = strings.ToUpper(e.get("CONFIG_TYPE", "FILE"))
	switch s.ConfigType {
	case "FILE":
	case "GRPC_XDS_SOTW":
		s.XDS = readXDS(e)
		for name, why := range xdsIgnoredVars {
			if e.getenv(name) != "" {
				s.Ignored = append(s.Ignored, name+": "+why)
			}
		}
	default:
		e.failf("CONFIG_TYPE: want FILE or GRPC_XDS_SOTW, got %q", s.ConfigType)
	}
}

// xdsIgnoredVars are envoyproxy/ratelimit's xDS variables that do not
// apply, and why.
var xdsIgnoredVars = map[string]string{
	"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL": "the first retry waits CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL",
	"XDS_CLIENT_BACKOFF_RANDOM_FACTOR":    "each retry waits twice the last, up to XDS_CLIENT_BACKOFF_MAX_INTERVAL",
}

// readXDS reads the xDS settings, with envoyproxy/ratelimit's defaults.
func readXDS(e *envReader) *XDSSettings {
	x := &XDSSettings{
		ServerURL:        e.get("CONFIG_GRPC_XDS_SERVER_URL", "localhost:18000"),
		NodeID:           e.get("CONFIG_GRPC_XDS_NODE_ID", "default"),
		NodeMetadata:     e.pairs("CONFIG_GRPC_XDS_NODE_METADATA", "="),
		Headers:          e.pairs("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", ":"),
		RetryInterval:    cmp.Or(e.duration("CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL"), 3*time.Second),
		MaxRetryInterval: cmp.Or(e.duration("XDS_CLIENT_BACKOFF_MAX_INTERVAL"), 60*time.Second),
		Jitter:           e.boolean("XDS_CLIENT_BACKOFF_JITTER", true),
		UseTLS:           e.boolean("CONFIG_GRPC_XDS_SERVER_USE_TLS", false),
		ForceStart:       e.boolean("FORCE_START_WITHOUT_INITIAL_CONFIG", false),
	}
	if v := e.getenv("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			e.failf("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES: want a number of bytes, got %q", v)
		}
		x.MaxMsgSize = n
	}
	if x.UseTLS {
		x.ClientCert, x.ClientKey = e.getenv("CONFIG_GRPC_XDS_CLIENT_TLS_CERT"), e.getenv("CONFIG_GRPC_XDS_CLIENT_TLS_KEY")
		x.CACert, x.SAN = e.getenv("CONFIG_GRPC_XDS_SERVER_TLS_CACERT"), e.getenv("CONFIG_GRPC_XDS_SERVER_TLS_SAN")
		if (x.ClientCert == "") != (x.ClientKey == "") {
			e.failf("CONFIG_GRPC_XDS_CLIENT_TLS_CERT and CONFIG_GRPC_XDS_CLIENT_TLS_KEY: set both or neither")
		}
	}
	return x
}

// pairs is the variable name as "k<sep>v,k<sep>v", nil when it is unset
// or empty; an entry without sep is reported.
func (e *envReader) pairs(name, sep string) map[string]string {
	v := e.getenv(name)
	if v == "" {
		return nil
	}
	m := map[string]string{}
	for _, entry := range strings.Split(v, ",") {
		k, val, ok := strings.Cut(strings.TrimSpace(entry), sep)
		if !ok || k == "" {
			e.failf("%s: want key%svalue[,key%svalue...], got %q", name, sep, sep, v)
			return nil
		}
		m[k] = val
	}
	return m
}

// Options are the WatchXDS options of these settings, loading as load
// says; the TLS files are read now.
func (x *XDSSettings) Options(load LoadOptions) (XDSOptions, error) {
	o := XDSOptions{ServerURL: x.ServerURL, Node: x.node(), Headers: x.Headers, RetryInterval: x.RetryInterval,
		MaxRetryInterval: x.MaxRetryInterval, Jitter: x.Jitter, Load: load}
	if x.UseTLS {
		c, err := x.tlsConfig()
		if err != nil {
			return o, fmt.Errorf("reading the xDS TLS settings: %w", err)
		}
		o.Credentials = credentials.NewTLS(c)
	}
	if x.MaxMsgSize > 0 {
		o.DialOptions = append(o.DialOptions, grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(x.MaxMsgSize)))
	}
	return o, nil
}

// node is the node the settings name.
func (x *XDSSettings) node() *corev3.Node {
	fields := make(map[string]*structpb.Value, len(x.NodeMetadata))
	for k, v := range x.NodeMetadata {
		fields[k] = structpb.NewStringValue(v)
	}
	return &corev3.Node{Id: x.NodeID, Metadata: &structpb.Struct{Fields: fields}}
}

// tlsConfig is the client's TLS configuration.
func (x *XDSSettings) tlsConfig() (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: x.SAN}
	if x.ClientCert != "" {
		pair, err := tls.LoadX509KeyPair(x.ClientCert, x.ClientKey)
		if err != nil {
			return nil, err
		}
		c.Certificates = []tls.Certificate{pair}
	}
	if x.CACert != "" {
		pem, err := os.ReadFile(x.CACert)
		if err != nil {
			return nil, err
		}
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, errors.New(x.CACert + ": no PEM certificate")
		}
		c.RootCAs = pool
	}
	return c, nil
}
