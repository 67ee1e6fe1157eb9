//go:build !linux

package redistest

import "os/exec"

// detach is a no-op where the process attributes it uses do not exist.
func detach(*exec.Cmd) {}
