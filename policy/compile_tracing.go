package policy

import (
	"errors"
	"fmt"
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
	t := TracingSettings{Sample: c.share("tracing.sample", s.Sample), ServiceName: c.serviceName(s.ServiceName, env)}
	if endpoint == "" {
		if s.Sample != nil || s.ServiceName != "" {
			c.warnf("tracing", "tracing is off: sample and service_name take effect only with an endpoint (tracing.endpoint or OTEL_EXPORTER_OTLP_ENDPOINT)")
		}
		return
	}
	if t.URL = c.tracesURL(field, endpoint); t.URL != "" {
		p.Tracing = t
	}
}

// serviceName compiles the name the gateway has in traces: the file's,
// else OTEL_SERVICE_NAME's, else "tollgate".
func (c *compiler) serviceName(name string, env Env) string {
	switch {
	case name != "":
	case env.lookup("OTEL_SERVICE_NAME") != "":
		name = env.lookup("OTEL_SERVICE_NAME")
	default:
		name = "tollgate"
	}
	if len(name) > 255 || strings.ContainsFunc(name, func(r rune) bool { return r < ' ' || r == 0x7f }) {
		c.addf("tracing.service_name", "want at most 255 printable characters, got %q", name)
	}
	return name
}

// tracesURL returns where spans are posted for the collector's base URL
// endpoint (read from field): its /v1/traces; or "" when endpoint is not
// such a URL, a problem reported.
func (c *compiler) tracesURL(field, endpoint string) string {
	u, err := url.Parse(endpoint)
	if err != nil {
		c.addf(field, "want the collector's OTLP/HTTP base URL, e.g. http://collector:4318: %v", err)
		return ""
	}
	if err := checkCollectorURL(u, endpoint); err != nil {
		c.addf(field, "%v", err)
		return ""
	}
	u.Path = strings.TrimSuffix(u.Path, "/") + "/v1/traces"
	u.RawPath = ""
	return u.String()
}

// checkCollectorURL reports why u, parsed from endpoint, is not a
// collector's base URL: http or https, with a host, without credentials,
// query or fragment.
func checkCollectorURL(u *url.URL, endpoint string) error {
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("want an http or https URL, e.g. http://collector:4318, got %q", endpoint)
	case u.Host == "" || u.Hostname() == "":
		return fmt.Errorf("want a URL with a host, e.g. http://collector:4318, got %q", endpoint)
	case u.User != nil:
		return errors.New("credentials in the URL would be logged; use OTEL_EXPORTER_OTLP_HEADERS")
	case u.RawQuery != "" || u.Fragment != "":
		return fmt.Errorf("want a base URL without query or fragment, got %q", endpoint)
	}
	return nil
}
