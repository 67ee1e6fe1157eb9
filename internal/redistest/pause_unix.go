//go:build unix

package redistest

import (
	"errors"
	"fmt"
	"syscall"
)

// Pause stops the server's process (SIGSTOP) without closing anything, as
// a hung or swapped-out server: connections stay open and calls go
// unanswered until Resume, which then answers them all.
func (s *Server) Pause() error { return s.signal(syscall.SIGSTOP, "pausing") }

// Resume continues a paused server (SIGCONT).
func (s *Server) Resume() error { return s.signal(syscall.SIGCONT, "resuming") }

func (s *Server) signal(sig syscall.Signal, what string) error {
	s.mu.Lock()
	cmd := s.cmd
	s.mu.Unlock()
	if cmd == nil {
		return fmt.Errorf("%s redis on port %d: %w", what, s.port, errors.New("not running"))
	}
	if err := cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("%s redis on port %d: %w", what, s.port, err)
	}
	return nil
}
