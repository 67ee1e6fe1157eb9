package httplimit

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"sync"

	"github.com/tollgate/tollgate/engine"
	"github.com/tollgate/tollgate/identity"
	"github.com/tollgate/tollgate/llm"
	"github.com/tollgate/tollgate/policy"
)

// heldBodies bounds the bytes of bodies held at once for reading their
// credentials, as a multiple of the largest one, and heldPerClient the
// share of them one client (an IPv4 address, an IPv6 /64) may hold: past
// either a request whose body must be read is answered 503, so a client
// that dribbles large bodies keeps no one else's from being read.
const (
	heldBodies    = 64
	heldPerClient = 8
)

// A bodyBudget counts the bytes of the bodies held, in all and by client.
type bodyBudget struct {
	mu    sync.Mutex
	total int64
	by    map[netip.Prefix]int64
}

// take holds n bytes for client, unless that passes the client's share
// or the total of bodies of up to limit bytes.
func (b *bodyBudget) take(client netip.Prefix, n, limit int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.total+n > heldBodies*limit || b.by[client]+n > heldPerClient*limit {
		return false
	}
	if b.by == nil {
		b.by = map[netip.Prefix]int64{}
	}
	b.total += n
	b.by[client] += n
	return true
}

// give gives back n bytes client held.
func (b *bodyBudget) give(client netip.Prefix, n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.total -= n
	if b.by[client] -= n; b.by[client] <= 0 {
		delete(b.by, client)
	}
}

// A requestBody is a request's body as the engine asks for it
// (engine.Body): read for credentials (readCredentialBody), held until
// release, and for a login (readLogin; the engine asks forward-auth for
// none).
type requestBody struct {
	m    *middleware
	r    *http.Request
	held func() // gives back what readCredentialBody holds; nil for none
	kind identity.BodyKind
	raw  []byte // the body read for credentials, if it was
}

func (b *requestBody) Credentials(client netip.Addr) ([]string, bool, error) {
	body, err := b.m.readCredentialBody(b.r, client)
	b.held, b.kind, b.raw = body.release, body.kind, body.raw
	return body.tokens, body.malformed, err
}

// Tokens reads a token route's request from the JSON body read for
// credentials (so read once, within identity.max_body, and passed on as
// it came): anything else is refused.
func (b *requestBody) Tokens(t *policy.Tokens) (engine.TokenRequest, error) {
	if b.kind != identity.BodyJSON || b.raw == nil {
		return engine.TokenRequest{}, fmt.Errorf("%w: a token route takes a JSON body (Content-Type: application/json)", engine.ErrBadTokenRequest)
	}
	req, err := llm.ParseRequest(b.raw, llm.RequestOptions{Fields: t.Fields})
	if err != nil {
		return engine.TokenRequest{}, fmt.Errorf("%w: %v", engine.ErrBadTokenRequest, err)
	}
	return engine.TokenRequest{Model: req.Model, MaxOutput: req.MaxOutput, Choices: req.Choices, Bytes: int64(len(b.raw))}, nil
}

func (b *requestBody) Login(lg *policy.Login) (*identity.Login, error) { return readLogin(b.r, lg) }

func (b *requestBody) release() {
	if b.held != nil {
		b.held()
	}
}

// A bodyRead is a request body read for its credentials: the tokens it
// holds, and release, to call when the request is done with it.
type bodyRead struct {
	tokens    []string
	malformed bool // a token field no key could be (identity.ErrMalformedKey)
	release   func()
	kind      identity.BodyKind
	raw       []byte // the body read (nil for an opaque one, not read)
}

// A problemError is an error answered with its problem.
type problemError struct{ Problem }

func (p *problemError) Error() string { return p.Detail }

func badBody(status int, detail string) error {
	return &problemError{Problem{Type: ProblemBadRequest, Status: status, Detail: detail}}
}

// readCredentialBody reads the body of r, when it is one frameworks parse
// into parameters (identity.BodyKindOf: a form, multipart, JSON, a POST
// without a Content-Type), whole and up to the policy's
// MaxCredentialBody, puts it back for the handler behind, and returns the
// credentials it holds (identity.BodyTokens). A body the gateway cannot
// read as every framework would is refused: two Content-Types (400),
// compressed (415), too large (413), not parsing as its type says (400);
// so is one when too many are held at once by all, or by client's
// prefix (503); the error is a *problemError, or the body's reader's.
func (m *middleware) readCredentialBody(r *http.Request, client netip.Addr) (bodyRead, error) {
	none := bodyRead{release: func() {}}
	kind, err := credentialBodyKind(r)
	if err != nil || kind == identity.BodyOpaque {
		return none, err
	}
	raw, release, err := m.holdBody(r, client)
	if err != nil {
		return none, err
	}
	putBody(r, raw)
	fields := m.opts.Policy.CredentialFields
	if fields == nil {
		fields = identity.DefaultFields
	}
	tokens, err := fields.BodyTokens(kind, r.Header.Get("Content-Type"), raw)
	switch {
	case errors.Is(err, identity.ErrMalformedKey):
		return bodyRead{malformed: true, release: release, kind: kind, raw: raw}, nil
	case err != nil:
		release()
		return none, badBody(http.StatusBadRequest, "the body does not parse as its Content-Type says, so the credentials it may hold cannot be read")
	}
	return bodyRead{tokens: tokens, release: release, kind: kind, raw: raw}, nil
}

// readUpTo reads body to its end, or to one byte past limit: into a
// buffer of the size the request declares (size, or -1 for unknown)
// when it declares one.
func readUpTo(body io.Reader, size, limit int64) ([]byte, error) {
	lr := io.LimitReader(body, limit+1)
	if size <= 0 {
		return io.ReadAll(lr)
	}
	// One byte more than declared, so that the end is read in the same
	// buffer; net/http stops a body at its Content-Length.
	b := make([]byte, 0, size+1)
	for {
		n, err := lr.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		switch {
		case err == io.EOF:
			return b, nil
		case err != nil:
			return b, err
		case len(b) == cap(b):
			b = append(b, 0)[:len(b)] // grow; LimitReader bounds it
		}
	}
}

// credentialBodyKind returns the kind of r's body (identity.BodyKindOf),
// BodyOpaque for none, refusing two Content-Types and a compressed body
// of a kind that is read.
func credentialBodyKind(r *http.Request) (identity.BodyKind, error) {
	if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 && len(r.TransferEncoding) == 0 {
		return identity.BodyOpaque, nil
	}
	kind, err := identity.BodyKindOf(r.Method, r.Header.Values("Content-Type"))
	if err != nil {
		return 0, badBody(http.StatusBadRequest, "the request has more than one Content-Type: servers read one or the other")
	}
	if kind == identity.BodyOpaque {
		return kind, nil
	}
	if identity.BodyEncoded(r.Header) {
		return 0, badBody(http.StatusUnsupportedMediaType,
			"a compressed form, JSON or multipart body is not accepted: the credentials it could hold are read first; send it uncompressed")
	}
	return kind, nil
}

// holdBody reads r's body whole, up to the policy's MaxCredentialBody,
// holding its bytes in the budget of bodies held for client's prefix
// until release is called. Too large a body (413) or too many held (503)
// is a *problemError; an error reading it is the body's reader's.
func (m *middleware) holdBody(r *http.Request, client netip.Addr) (raw []byte, release func(), err error) {
	limit := m.opts.Policy.MaxCredentialBody
	if limit <= 0 {
		limit = policy.DefaultMaxCredentialBody
	}
	tooLarge := badBody(http.StatusRequestEntityTooLarge,
		fmt.Sprintf("a form, JSON or multipart body is read for credentials up to %d bytes (identity.max_body)", limit))
	if r.ContentLength > limit {
		return nil, nil, tooLarge
	}
	hold := limit
	if r.ContentLength > 0 {
		hold = r.ContentLength
	}
	prefix := identity.ClientPrefix(client)
	if !m.held.take(prefix, hold, limit) {
		return nil, nil, &problemError{Problem{Type: ProblemUnavailable, Status: http.StatusServiceUnavailable, RetryAfter: 1,
			Detail: "too many large bodies are being read at once; retry shortly"}}
	}
	release = func() { m.held.give(prefix, hold) }
	raw, err = readUpTo(r.Body, r.ContentLength, limit)
	switch {
	case err != nil:
		release()
		return nil, nil, err
	case int64(len(raw)) > limit:
		release()
		return nil, nil, tooLarge
	}
	return raw, release, nil
}

// putBody gives r the body raw in place of the one read, framed by its
// length.
func putBody(r *http.Request, raw []byte) {
	r.Body = io.NopCloser(bytes.NewReader(raw))
	r.ContentLength = int64(len(raw))
	r.Header.Set("Content-Length", strconv.Itoa(len(raw)))
	r.Header.Del("Transfer-Encoding")
	r.TransferEncoding = nil
}

// writeUnread answers a request whose body did not arrive (in time, or
// at all: malformed chunking, a client gone), closing the connection:
// never an empty 200.
func writeUnread(w http.ResponseWriter, err error) {
	w.Header().Set("Connection", "close")
	if errors.Is(err, os.ErrDeadlineExceeded) {
		WriteProblem(w, Problem{Type: ProblemBodyTimeout, Status: http.StatusRequestTimeout, Detail: "the request body did not arrive in time"})
		return
	}
	WriteProblem(w, Problem{Type: ProblemBadRequest, Status: http.StatusBadRequest, Detail: "the request body could not be read"})
}
