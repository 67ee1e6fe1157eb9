//go:build !(linux && amd64)

package memory

import "time"

// wallMS returns time.Now().UnixMilli().
func wallMS() int64 { return time.Now().UnixMilli() }
