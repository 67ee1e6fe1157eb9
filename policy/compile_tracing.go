package policy

import (
	"net/url"
	"strings"
)

// tracing compiles the tracing settings. The endpoint comes from the file,
// else from OTEL_EXPORTER_OTLP_ENDPOINT, as OpenTelemetry's SDKs take it;
// the service name likewise from OTEL_SERVICE_NAME.
func (c *compiler) tracing(p *Policy, s TracingSpec, env Env) {
	field, endpoint := "tracing.endpoint", s.Endpoint
	if endpoint == "" {
		field, endpoint = "OTEL_EXPORTER_OTLP_ENDPOINT (the environment variable, as tracing.endpoint is unset)", env.lookup("OTEL_EXPORTER_OTLP_ENDPOINT")
	}
	t := TracingSettings{Sample: 1, ServiceName: "tollgate"}
	if s.Sample != nil {
		if v := *s.Sample; v < 0 || v > 1 || v != v {
			c.addf("tracing.sample", "want a share from 0 to 1, got %v", v)
		} else {
			t.Sample = v
		}
	}
	switch name := s.ServiceName; {
	case name != "":
		t.ServiceName = name
	case env.lookup("OTEL_SERVICE_NAME") != "":
		t.ServiceName = env.lookup("OTEL_SERVICE_NAME")
	}
	if len(t.ServiceName) > 255 || strings.ContainsFunc(t.ServiceName, func(r rune) bool { return r < ' ' || r == 0x7f }) {
		c.addf("tracing.service_name", "want at most 255 printable characters, got %q", t.ServiceName)
	}
	if endpoint == "" {
		if s.Sample != nil || s.ServiceName != "" {
			c.warnf("tracing", "tracing is off: sample and service_name take effect only with an endpoint (tracing.endpoint or OTEL_EXPORTER_OTLP_ENDPOINT)")
		}
		return
	}
	u, err := url.Parse(endpoint)
	switch {
	case err != nil:
		c.addf(field, "want the collector's OTLP/HTTP base URL, e.g. http://collector:4318: %v", err)
		return
	case u.Scheme != "http" && u.Scheme != "https":
		c.addf(field, "want an http or https URL, e.g. http://collector:4318, got %q", endpoint)
		return
	case u.Host == "" || u.Hostname() == "":
		c.addf(field, "want a URL with a host, e.g. http://collector:4318, got %q", endpoint)
		return
	case u.User != nil:
		c.addf(field, "credentials in the URL would be logged; use OTEL_EXPORTER_OTLP_HEADERS")
		return
	case u.RawQuery != "" || u.Fragment != "":
		c.addf(field, "want a base URL without query or fragment, got %q", endpoint)
		return
	}
	u.Path = strings.TrimSuffix(u.Path, "/") + "/v1/traces"
	u.RawPath = ""
	t.URL = u.String()
	p.Tracing = t
}
