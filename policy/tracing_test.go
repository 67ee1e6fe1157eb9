package policy_test

import (
	"strings"
	"testing"

	"github.com/tollgate/tollgate/policy"
)

const tracingBase = `version: v1
identity: {secret: 0123456789abcdef0123, anonymous_plan: free}
plans:
  free: {rate: 100, period: 1m}
routes:
  - {name: api, path: /api/, upstream: builtin:echo}
`

func TestTracingSettings(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		vars       map[string]string
		want       policy.TracingSettings
	}{
		{name: "off by default", want: policy.TracingSettings{}},
		{name: "endpoint", yaml: "tracing: {endpoint: \"http://collector:4318\"}",
			want: policy.TracingSettings{URL: "http://collector:4318/v1/traces", Sample: 1, ServiceName: "tollgate"}},
		{name: "base path kept", yaml: "tracing: {endpoint: \"https://c.example/otlp/\", sample: 0.25, service_name: edge}",
			want: policy.TracingSettings{URL: "https://c.example/otlp/v1/traces", Sample: 0.25, ServiceName: "edge"}},
		{name: "from the environment", vars: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://env:4318", "OTEL_SERVICE_NAME": "gw"},
			want: policy.TracingSettings{URL: "http://env:4318/v1/traces", Sample: 1, ServiceName: "gw"}},
		{name: "the file wins", yaml: "tracing: {endpoint: \"http://file:4318\", service_name: f}",
			vars: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://env:4318", "OTEL_SERVICE_NAME": "gw"},
			want: policy.TracingSettings{URL: "http://file:4318/v1/traces", Sample: 1, ServiceName: "f"}},
		{name: "sample zero", yaml: "tracing: {endpoint: \"http://c:4318\", sample: 0}",
			want: policy.TracingSettings{URL: "http://c:4318/v1/traces", Sample: 0, ServiceName: "tollgate"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := policy.ParseEnv([]byte(tracingBase+tc.yaml), "p.yaml", policy.Env{Vars: tc.vars})
			if err != nil {
				t.Fatal(err)
			}
			if p.Tracing != tc.want {
				t.Fatalf("got %+v, want %+v", p.Tracing, tc.want)
			}
			if p.Tracing.On() != (tc.want.URL != "") {
				t.Fatal("On disagrees with URL")
			}
		})
	}
}

func TestTracingInvalid(t *testing.T) {
	for _, tc := range []struct {
		yaml string
		vars map[string]string
		want string
	}{
		{yaml: "tracing: {endpoint: \"collector:4318\"}", want: "tracing.endpoint: want an http or https URL"},
		{yaml: "tracing: {endpoint: \"grpc://collector:4317\"}", want: "want an http or https URL"},
		{yaml: "tracing: {endpoint: \"http://\"}", want: "want a URL with a host"},
		{yaml: "tracing: {endpoint: \"http://u:p@c:4318\"}", want: "credentials in the URL"},
		{yaml: "tracing: {endpoint: \"http://c:4318/?x=1\"}", want: "without query or fragment"},
		{yaml: "tracing: {endpoint: \"http://c:4318\", sample: 1.5}", want: "tracing.sample: want a share from 0 to 1, got 1.5"},
		{yaml: "tracing: {endpoint: \"http://c:4318\", sample: -0.1}", want: "tracing.sample"},
		{yaml: "tracing: {endpoint: \"http://c:4318\", sample: .nan}", want: "tracing.sample"},
		{yaml: "tracing: {endpoint: \"http://c:4318\", service_name: \"a\\nb\"}", want: "tracing.service_name"},
		{vars: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "localhost:4318"}, want: "OTEL_EXPORTER_OTLP_ENDPOINT"},
	} {
		_, err := policy.ParseEnv([]byte(tracingBase+tc.yaml), "p.yaml", policy.Env{Vars: tc.vars})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %v: got %v, want an error with %q", tc.yaml, tc.vars, err, tc.want)
		}
	}
}

// TestTracingWithoutEndpointWarns: a sample or service name with no
// endpoint anywhere loads (tracing off) with a warning.
func TestTracingWithoutEndpointWarns(t *testing.T) {
	p, err := policy.ParseEnv([]byte(tracingBase+"tracing: {sample: 0.5}"), "p.yaml", policy.Env{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Tracing.On() || len(p.Warnings) != 1 || !strings.Contains(p.Warnings[0].Msg, "tracing is off") {
		t.Fatalf("tracing %+v, warnings %v", p.Tracing, p.Warnings)
	}
}
