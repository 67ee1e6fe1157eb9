//go:build !unix

package redistest

import "errors"

var errNoSignals = errors.New("pausing redis-server: this system has no SIGSTOP")

// Pause is unavailable where processes cannot be stopped by a signal.
func (s *Server) Pause() error { return errNoSignals }

// Resume is unavailable where processes cannot be stopped by a signal.
func (s *Server) Resume() error { return errNoSignals }
