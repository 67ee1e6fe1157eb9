//go:build !unix

package gateway

import "errors"

// FileLimit returns the process's soft and hard limits on open files;
// this platform has none to read.
func FileLimit() (soft, hard uint64, err error) {
	return 0, 0, errors.ErrUnsupported
}

// RaiseFileLimit raises the soft limit on open files to the hard limit;
// this platform has none to raise.
func RaiseFileLimit() (soft, hard uint64, err error) {
	return 0, 0, errors.ErrUnsupported
}
