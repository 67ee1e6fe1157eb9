//go:build unix

package redistest

import (
	"fmt"
	"syscall"
)

// Pause stops the server with SIGSTOP, as a long stall would (a fork for
// a snapshot, a swapped-out page, a slow command): connections stay open
// and what clients send waits in the socket until Resume. Commands sent
// meanwhile run, in the order the server reads them, once it resumes.
func (s *Server) Pause() error { return s.signal(syscall.SIGSTOP) }

// Resume continues a paused server (SIGCONT).
func (s *Server) Resume() error { return s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig syscall.Signal) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return fmt.Errorf("signalling redis-server on port %d: not running", s.port)
	}
	if err := s.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("signalling redis-server on port %d: %w", s.port, err)
	}
	return nil
}
