//go:build unix

package gateway

import (
	"fmt"
	"syscall"
)

// FileLimit returns the process's soft and hard limits on open files.
func FileLimit() (soft, hard uint64, err error) {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 0, 0, fmt.Errorf("reading the file limit: %w", err)
	}
	return uint64(l.Cur), uint64(l.Max), nil
}

// RaiseFileLimit raises the process's soft limit on open files to its hard
// limit, and returns both as they then are. (Go's runtime already raises
// it at start, to one below the hard limit; this makes it exact and
// explicit, for the log.)
func RaiseFileLimit() (soft, hard uint64, err error) {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 0, 0, fmt.Errorf("reading the file limit: %w", err)
	}
	if l.Cur < l.Max {
		want := l
		want.Cur = l.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want); err != nil {
			return uint64(l.Cur), uint64(l.Max), fmt.Errorf("raising the file limit to %d: %w", l.Max, err)
		}
	}
	return FileLimit()
}
