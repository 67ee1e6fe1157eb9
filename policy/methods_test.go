package policy_test

import (
	"net/http"
	"slices"
	"testing"

	"github.com/tollgate/tollgate/policy"
)

func TestMethodReadings(t *testing.T) {
	for _, c := range []struct {
		method string
		header http.Header
		query  string
		want   []string
	}{
		{"POST", nil, "", nil},
		{"POST", nil, "a=1&method=PUT", nil},
		{"POST", http.Header{"X-Http-Method-Override": {"delete"}}, "", []string{"DELETE"}},
		{"POST", http.Header{"X-Http-Method": {"PUT"}, "X-Method-Override": {"PATCH, put"}}, "", []string{"PUT", "PATCH"}},
		{"POST", http.Header{"X-Http-Method-Override": {"POST"}}, "", nil},
		{"POST", nil, "_method=DELETE", []string{"DELETE"}},
		{"POST", nil, "a=1;_METHOD=put&%5Fmethod=patch", []string{"PUT", "PATCH"}},
		{"GET", nil, "x_method=PUT&_methods=PUT", nil},
	} {
		if got := policy.MethodReadings(c.method, c.header, c.query); !slices.Equal(got, c.want) {
			t.Errorf("MethodReadings(%s, %v, %q) = %q, want %q", c.method, c.header, c.query, got, c.want)
		}
	}
}
