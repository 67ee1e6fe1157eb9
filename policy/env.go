package policy

import (
	"crypto/rand"
	"os"
	"strings"
	"sync"
)

// Env is all that compiling a policy takes from outside its files: the
// environment variables a file may name (listeners.admin_token_env,
// identity.secret_env) and OpenTelemetry's OTEL_EXPORTER_OTLP_ENDPOINT and
// OTEL_SERVICE_NAME (see TracingSpec), the identity secret to use when the file sets
// none, and listen addresses given on the command line. Compiling reads nothing else, so the same files and Env compile
// to the same policy. Load and Parse compile with [ProcessEnv]; ParseEnv
// with any Env.
type Env struct {
	// Vars maps an environment variable's name to its value; a name it
	// lacks is unset.
	Vars map[string]string
	// Secret keys the identity HMAC when the file sets no secret (the
	// policy's SecretGenerated is then true): at least 16 random bytes,
	// the same for every policy a process compiles, so that a reload
	// hashes every subject as before and keeps its budgets.
	Secret []byte
	// Public and Admin, when set, replace the file's listeners.public and
	// listeners.admin (tollgate serve --listen, --admin), and are checked
	// as the file's would be (an admin listener off loopback needs a
	// token).
	Public, Admin string
	// NoFiles, when set, makes the compiler open no file: a keys_file is
	// not read (the policy gets no keys from it, and a warning says so).
	// For policy text from a request (the admin listener's /simulate),
	// which must not make the process open, read or block on a path of
	// its choosing (a FIFO, /dev/zero, a secret whose content an error
	// would echo).
	NoFiles bool
	// Blind, when set, makes every environment variable the policy names
	// read as set to one placeholder (a URL of 64 bytes), whatever Vars
	// holds: for policy text from a request (/simulate), whose errors
	// must not tell whether a variable of the process is set, or how long
	// its value is.
	Blind bool
}

// blindValue is what every variable reads as in a Blind Env: long enough
// for every secret and token, and a URL where one is wanted.
var blindValue = "http://placeholder.invalid/" + strings.Repeat("x", 64-len("http://placeholder.invalid/"))

// lookup returns the value of the environment variable name ("" when
// unset).
func (e Env) lookup(name string) string {
	if e.Blind {
		return blindValue
	}
	return e.Vars[name]
}

// processSecret is the secret generated for policies that set none: 32
// random bytes, drawn once per process.
var processSecret = sync.OnceValue(func() []byte {
	b := make([]byte, 32)
	rand.Read(b) // never fails (crypto/rand crashes the program instead)
	return b
})

// ProcessEnv returns this process's environment variables and the secret
// generated for it, 32 random bytes drawn once per process.
func ProcessEnv() Env {
	vars := map[string]string{}
	for _, kv := range os.Environ() {
		if k, v, ok := strings.Cut(kv, "="); ok {
			vars[k] = v
		}
	}
	return Env{Vars: vars, Secret: processSecret()}
}
