package policy

import "log/slog"

// logLevels maps logging.level to the least severe level logged.
var logLevels = map[string]slog.Level{
	"":      slog.LevelInfo,
	"debug": slog.LevelDebug,
	"info":  slog.LevelInfo,
	"warn":  slog.LevelWarn,
	"error": slog.LevelError,
}

// logging compiles the log settings.
func (c *compiler) logging(p *Policy, s LogSpec) {
	if l, ok := logLevels[s.Level]; ok {
		p.Log.Level = l
	} else {
		c.addf("logging.level", "want debug, info, warn or error, got %q", s.Level)
	}
	p.Log.Text = c.either("logging.format", s.Format, "json", "text", "json or text")
	p.Log.AccessPerSecond = 1000
	if s.AccessPerSecond < 0 {
		c.addf("logging.access_per_second", "want a positive number of lines, got %d", s.AccessPerSecond)
	} else if s.AccessPerSecond > 0 {
		p.Log.AccessPerSecond = s.AccessPerSecond
	}
	p.Log.AccessSample = c.share("logging.access_sample", s.AccessSample)
}
