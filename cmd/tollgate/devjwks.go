package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/lestrrat-go/jwx/v3/jwa"
	"github.com/lestrrat-go/jwx/v3/jwk"
	"github.com/lestrrat-go/jwx/v3/jwt"
)

// The dev-jwks defaults, which examples/jwt.yaml names.
const (
	devJWKSAddr = "127.0.0.1:8088"
	devJWKSPath = "/.well-known/jwks.json"
	devIssuer   = "tollgate-dev-jwks"
	devAudience = "tollgate-api"
)

const devJWKSUsage = `usage:
  tollgate dev-jwks serve [--listen ADDR] [--key FILE]
        serve the key's JWKS at http://ADDR` + devJWKSPath + ` (ADDR on loopback,
        default ` + devJWKSAddr + `)
  tollgate dev-jwks token --sub SUBJECT [--plan PLAN] [--claim NAME=VALUE]...
                          [--ttl DURATION] [--iss ISSUER] [--aud AUDIENCE] [--key FILE]
        print a JWT signed with the key (issuer ` + devIssuer + `, audience ` + devAudience + `)
For development only: a stand-in for an identity provider, for trying
examples/jwt.yaml. Both use one key file, created on first use.
`

// devKeyHelp describes the --key flag of both subcommands.
const devKeyHelp = "the signing key (a private JWK), created with a new ES256 key if missing (default: tollgate/dev-jwks-key.json in the user cache directory)"

// devJWKS runs `tollgate dev-jwks serve|token`.
func devJWKS(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, devJWKSUsage)
		return 2
	}
	switch args[0] {
	case "serve":
		return devJWKSServe(args[1:], stdout, stderr)
	case "token":
		return devJWKSToken(args[1:], stdout, stderr)
	case "-h", "--help", "help":
		fmt.Fprint(stdout, devJWKSUsage)
		return 0
	}
	fmt.Fprintf(stderr, "dev-jwks: unknown subcommand %q\n%s", args[0], devJWKSUsage)
	return 2
}

// devJWKSServeFlags returns dev-jwks serve's flag set, which sets listen
// and keyFile.
func devJWKSServeFlags(listen, keyFile *string) *flag.FlagSet {
	fs := flags("dev-jwks serve", "dev-jwks serve [--listen ADDR] [--key FILE]")
	fs.StringVar(listen, "listen", devJWKSAddr, "the loopback address to serve on (host:port)")
	fs.StringVar(keyFile, "key", "", devKeyHelp)
	return fs
}

// devJWKSTokenFlags returns dev-jwks token's flag set, which sets t and
// keyFile.
func devJWKSTokenFlags(t *tokenSpec, keyFile *string) *flag.FlagSet {
	fs := flags("dev-jwks token", "dev-jwks token --sub SUBJECT [--plan PLAN] [--claim NAME=VALUE]... [--ttl DURATION] [--iss ISSUER] [--aud AUDIENCE] [--key FILE]")
	fs.StringVar(&t.sub, "sub", "", "the subject, the sub claim (required)")
	fs.StringVar(&t.plan, "plan", "", "the plan claim, e.g. pro")
	fs.Func("claim", "another claim, NAME=VALUE with a string value (repeatable), e.g. org=acme", func(s string) error {
		t.claims = append(t.claims, s)
		return nil
	})
	fs.DurationVar(&t.ttl, "ttl", time.Hour, "how long the token is valid")
	fs.StringVar(&t.iss, "iss", devIssuer, "the issuer, the iss claim")
	fs.StringVar(&t.aud, "aud", devAudience, "the audience, the aud claim")
	fs.StringVar(keyFile, "key", "", devKeyHelp)
	return fs
}

// devJWKSServe serves the key's public half as a JWKS until SIGINT or
// SIGTERM.
func devJWKSServe(args []string, stdout, stderr io.Writer) int {
	var listen, keyFile string
	fs := devJWKSServeFlags(&listen, &keyFile)
	if code, done := parse(fs, args, stdout, stderr); done {
		return code
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return 2
	}
	if err := checkLoopback(listen); err != nil {
		fmt.Fprintln(stderr, "dev-jwks serve:", err)
		return 2
	}
	key, file, err := loadDevKey(keyFile)
	if err != nil {
		fmt.Fprintln(stderr, "dev-jwks serve:", err)
		return 1
	}
	handler, err := jwksHandler(key)
	if err != nil {
		fmt.Fprintln(stderr, "dev-jwks serve:", err)
		return 1
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		fmt.Fprintln(stderr, "dev-jwks serve:", err)
		return 1
	}
	url := "http://" + ln.Addr().String() + devJWKSPath
	kid, _ := key.KeyID()
	fmt.Fprintf(stdout, "development JWKS at %s (key %s, kid %s)\n", url, file, kid)
	fmt.Fprintf(stdout, "verify with identity.jwt: {jwks_url: %s, issuer: %s, audience: [%s]}\n", url, devIssuer, devAudience)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return exitCode(stderr, serveUntil(ctx, ln, handler))
}

// checkLoopback refuses a listen address off loopback: the development
// JWKS is for this machine alone.
func checkLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return fmt.Errorf("--listen %s: the development JWKS serves only on loopback (127.0.0.1, [::1] or localhost)", addr)
	}
	return nil
}

// jwksHandler answers GET devJWKSPath with a JWKS of key's public half.
func jwksHandler(key jwk.Key) (http.Handler, error) {
	pub, err := jwk.PublicKeyOf(key)
	if err != nil {
		return nil, fmt.Errorf("taking the public key: %w", err)
	}
	set := jwk.NewSet()
	if err := set.AddKey(pub); err != nil {
		return nil, fmt.Errorf("making the JWKS: %w", err)
	}
	body, err := json.Marshal(set)
	if err != nil {
		return nil, fmt.Errorf("encoding the JWKS: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+devJWKSPath, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(body)
	})
	return mux, nil
}

// serveUntil serves h on ln until ctx is done, then shuts down: it lets
// the requests in flight finish for a second, then closes what is left. A
// connection that a client dialled but never sent a request on (Go's
// transport dials ahead) counts as busy for 5 s, and waiting it out would
// be no better than closing it.
func serveUntil(ctx context.Context, ln net.Listener, h http.Handler) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return fmt.Errorf("serving the JWKS: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		srv.Close()
	}
	return nil
}

// devJWKSToken prints a JWT signed with the key.
func devJWKSToken(args []string, stdout, stderr io.Writer) int {
	var t tokenSpec
	var keyFile string
	fs := devJWKSTokenFlags(&t, &keyFile)
	if code, done := parse(fs, args, stdout, stderr); done {
		return code
	}
	claims, err := t.build(time.Now())
	if err == nil && fs.NArg() > 0 {
		err = fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if err != nil {
		fmt.Fprintln(stderr, "dev-jwks token:", err)
		fs.Usage()
		return 2
	}
	key, _, err := loadDevKey(keyFile)
	if err == nil {
		var tok string
		if tok, err = signToken(key, claims); err == nil {
			fmt.Fprintln(stdout, tok)
			return 0
		}
	}
	fmt.Fprintln(stderr, "dev-jwks token:", err)
	return 1
}

// tokenSpec is what dev-jwks token's flags ask for.
type tokenSpec struct {
	sub, plan, iss, aud string
	claims              []string // NAME=VALUE
	ttl                 time.Duration
}

// flagClaims are the claims set by dev-jwks token's own flags, which
// --claim may not set.
var flagClaims = []string{"sub", "iss", "aud", "iat", "exp", "nbf"}

// build returns the token's claims, issued at now.
func (t tokenSpec) build(now time.Time) (map[string]any, error) {
	switch {
	case t.sub == "":
		return nil, errors.New("--sub is required")
	case t.ttl <= 0:
		return nil, fmt.Errorf("--ttl must be positive, got %v", t.ttl)
	}
	c := map[string]any{"sub": t.sub, "iat": now.Unix(), "exp": now.Add(t.ttl).Unix()}
	for name, v := range map[string]string{"iss": t.iss, "aud": t.aud, "plan": t.plan} {
		if v != "" {
			c[name] = v
		}
	}
	for _, s := range t.claims {
		name, v, ok := strings.Cut(s, "=")
		switch {
		case !ok || name == "":
			return nil, fmt.Errorf("--claim %q: want NAME=VALUE", s)
		case slices.Contains(flagClaims, name):
			return nil, fmt.Errorf("--claim %q: %s is set by --sub, --iss, --aud or --ttl", s, name)
		case c[name] != nil:
			return nil, fmt.Errorf("--claim %q: %s is given twice", s, name)
		}
		c[name] = v
	}
	return c, nil
}

// signToken returns claims as a JWT signed with key, its kid in the
// header.
func signToken(key jwk.Key, claims map[string]any) (string, error) {
	tok := jwt.New()
	for name, v := range claims {
		if err := tok.Set(name, v); err != nil {
			return "", fmt.Errorf("setting claim %s: %w", name, err)
		}
	}
	alg, err := signingAlgorithm(key)
	if err != nil {
		return "", err
	}
	b, err := jwt.Sign(tok, jwt.WithKey(alg, key))
	if err != nil {
		return "", fmt.Errorf("signing the token: %w", err)
	}
	return string(b), nil
}

// signingAlgorithm returns the algorithm the key names (its alg).
func signingAlgorithm(key jwk.Key) (jwa.SignatureAlgorithm, error) {
	ka, ok := key.Algorithm()
	if !ok {
		return jwa.EmptySignatureAlgorithm(), errors.New("the key names no algorithm (alg)")
	}
	alg, ok := jwa.LookupSignatureAlgorithm(ka.String())
	if !ok {
		return jwa.EmptySignatureAlgorithm(), fmt.Errorf("the key's alg %q is not a signature algorithm", ka)
	}
	return alg, nil
}

// loadDevKey returns the private key in file (by default the user cache
// directory's tollgate/dev-jwks-key.json) and the file's name, creating
// the file with a new ES256 key if there is none.
func loadDevKey(file string) (jwk.Key, string, error) {
	if file == "" {
		dir, err := os.UserCacheDir()
		if err != nil {
			return nil, "", fmt.Errorf("finding the key file (name one with --key): %w", err)
		}
		file = filepath.Join(dir, "tollgate", "dev-jwks-key.json")
	}
	b, err := os.ReadFile(file)
	if errors.Is(err, fs.ErrNotExist) {
		// Another dev-jwks may create it at the same time: read whichever won.
		if err = createDevKey(file); err == nil || errors.Is(err, fs.ErrExist) {
			b, err = os.ReadFile(file)
		}
	}
	if err != nil {
		return nil, file, fmt.Errorf("reading the key: %w", err)
	}
	key, err := jwk.ParseKey(b)
	if err != nil {
		return nil, file, fmt.Errorf("parsing the key in %s: %w", file, err)
	}
	if private, err := jwk.IsPrivateKey(key); err != nil || !private {
		return nil, file, fmt.Errorf("the key in %s is not a private key", file)
	}
	if _, err := signingAlgorithm(key); err != nil {
		return nil, file, fmt.Errorf("the key in %s: %w", file, err)
	}
	return key, file, nil
}

// createDevKey writes a new ES256 private JWK, its kid its thumbprint,
// to file, unless file exists (fs.ErrExist).
func createDevKey(file string) error {
	raw, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("generating a key: %w", err)
	}
	key, err := jwk.Import(raw)
	if err != nil {
		return fmt.Errorf("importing the key: %w", err)
	}
	if err := jwk.AssignKeyID(key); err != nil {
		return fmt.Errorf("naming the key: %w", err)
	}
	if err := key.Set(jwk.AlgorithmKey, jwa.ES256()); err != nil {
		return fmt.Errorf("setting the key's alg: %w", err)
	}
	b, err := json.Marshal(key)
	if err != nil {
		return fmt.Errorf("encoding the key: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		return fmt.Errorf("creating the key's directory: %w", err)
	}
	// Written aside, then linked in place: a reader never sees half a key,
	// and an existing file is kept.
	tmp, err := os.CreateTemp(filepath.Dir(file), ".dev-jwks-key-*")
	if err != nil {
		return fmt.Errorf("writing the key: %w", err)
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.Write(append(b, '\n'))
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("writing the key: %w", err)
	}
	return os.Link(tmp.Name(), file)
}
