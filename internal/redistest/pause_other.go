//go:build !unix

package redistest

import "errors"

// Pause needs SIGSTOP, which this system does not have.
func (s *Server) Pause() error { return errors.New("pausing redis: not supported on this system") }

// Resume needs SIGCONT, which this system does not have.
func (s *Server) Resume() error { return errors.New("resuming redis: not supported on this system") }
