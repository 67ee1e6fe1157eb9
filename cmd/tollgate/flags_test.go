package main

import (
	"io"
	"testing"
)

// TestEnvFlags: a flag envFlag defines is its environment variable's
// value unless given, even given empty.
func TestEnvFlags(t *testing.T) {
	t.Setenv("TOLLGATE_CONFIG", "from-env.yaml")
	for _, c := range []struct {
		args   []string
		want   string
		reason string
	}{
		{nil, "from-env.yaml", "not given: the environment's"},
		{[]string{"--config", "flag.yaml"}, "flag.yaml", "given: the command line's, over the environment's"},
		{[]string{"--config="}, "", "given empty: empty, not the environment's"},
	} {
		var o serveOptions
		if code, done := parse(serveFlags(&o), c.args, io.Discard, io.Discard); done {
			t.Fatalf("%v: exit %d", c.args, code)
		}
		if o.config != c.want {
			t.Errorf("%v (%s): --config %q, want %q", c.args, c.reason, o.config, c.want)
		}
	}
}
