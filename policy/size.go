package policy

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// ByteSize is a number of bytes, written in a policy file as an integer or
// with a unit: B; KiB, MiB, GiB, TiB (or Ki, Mi, Gi, Ti: powers of 1024);
// kB, MB, GB, TB (or k, M, G, T: powers of 1000). For example 262144,
// 256MiB, "1.5 GiB".
type ByteSize int64

// byteUnits maps a unit, lower-cased, to its bytes.
var byteUnits = map[string]float64{
	"": 1, "b": 1,
	"kib": 1 << 10, "ki": 1 << 10, "mib": 1 << 20, "mi": 1 << 20,
	"gib": 1 << 30, "gi": 1 << 30, "tib": 1 << 40, "ti": 1 << 40,
	"kb": 1e3, "k": 1e3, "mb": 1e6, "m": 1e6, "gb": 1e9, "g": 1e9, "tb": 1e12, "t": 1e12,
}

// ParseByteSize parses a size as a policy file writes it (see [ByteSize]).
func ParseByteSize(s string) (ByteSize, error) {
	t := strings.TrimSpace(s)
	i := strings.IndexFunc(t, func(r rune) bool { return outside(r, '0', '9') && r != '.' })
	if i < 0 {
		i = len(t)
	}
	unit, ok := byteUnits[strings.ToLower(strings.TrimSpace(t[i:]))]
	n, err := strconv.ParseFloat(t[:i], 64)
	if !ok || err != nil || i == 0 {
		return 0, fmt.Errorf("invalid size %q (want bytes, or a size such as 512KiB, 256MiB, 1GiB)", s)
	}
	v := math.Floor(n * unit)
	if v >= math.MaxInt64 {
		return 0, fmt.Errorf("invalid size %q: too large", s)
	}
	return ByteSize(v), nil
}

// UnmarshalYAML implements yaml.Unmarshaler.
func (b *ByteSize) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: want a size such as 256MiB", n.Line)}}
	}
	v, err := ParseByteSize(n.Value)
	if err != nil {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: %v", n.Line, err)}}
	}
	*b = v
	return nil
}

// String returns the size with the largest binary unit that writes it
// whole, as ParseByteSize reads it.
func (b ByteSize) String() string {
	for _, u := range []struct {
		name string
		n    ByteSize
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if b != 0 && b%u.n == 0 {
			return strconv.FormatInt(int64(b/u.n), 10) + u.name
		}
	}
	return strconv.FormatInt(int64(b), 10) + "B"
}
