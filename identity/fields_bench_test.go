package identity_test

import (
	"net/http"
	"testing"

	"github.com/tollgate/tollgate/identity"
)

// BenchmarkCredentialFields: what reading the credential fields costs a
// request that has none, with a browser's cookies and a short query.
func BenchmarkCredentialFields(b *testing.B) {
	h := http.Header{"Cookie": {"_ga=GA1.2.1; session=abc123; theme=dark; lang=en; csrftoken=xyz"}}
	b.ReportAllocs()
	for b.Loop() {
		identity.DefaultFields.QueryTokens("page=2&sort=name&q=hello")
		identity.DefaultFields.CookieTokens(h)
	}
}
