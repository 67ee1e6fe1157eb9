//go:build !linux

package envoyrls_test

import "time"

// threadCPU is the wall clock where the thread's CPU clock is not read
// (see threadcpu_linux_test.go).
func threadCPU() time.Duration { return time.Duration(time.Now().UnixNano()) }
