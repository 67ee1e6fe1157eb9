package policy

import "log/slog"

// logging compiles the log settings.
func (c *compiler) logging(p *Policy, s LogSpec) {
	switch s.Level {
	case "", "info":
		p.Log.Level = slog.LevelInfo
	case "debug":
		p.Log.Level = slog.LevelDebug
	case "warn":
		p.Log.Level = slog.LevelWarn
	case "error":
		p.Log.Level = slog.LevelError
	default:
		c.addf("logging.level", "want debug, info, warn or error, got %q", s.Level)
	}
	switch s.Format {
	case "", "json":
	case "text":
		p.Log.Text = true
	default:
		c.addf("logging.format", "want json or text, got %q", s.Format)
	}
	p.Log.AccessPerSecond = 1000
	if s.AccessPerSecond < 0 {
		c.addf("logging.access_per_second", "want a positive number of lines, got %d", s.AccessPerSecond)
	} else if s.AccessPerSecond > 0 {
		p.Log.AccessPerSecond = s.AccessPerSecond
	}
	p.Log.AccessSample = 1
	if s.AccessSample != nil {
		if v := *s.AccessSample; v < 0 || v > 1 || v != v {
			c.addf("logging.access_sample", "want a share from 0 to 1, got %v", v)
		} else {
			p.Log.AccessSample = v
		}
	}
}
