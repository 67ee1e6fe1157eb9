package simulate

import (
	"fmt"
	"strings"
	"time"
)

// SVG returns a chart of the report's series: refusals per step under the
// active policy (solid) and the candidate (dashed), over the recorded
// window.
func (r *Report) SVG() string {
	const w, h, l, rt, t, b = 720, 240, 48, 12, 24, 28
	most := 1
	for _, p := range r.Series {
		most = max(most, p.Active, p.Candidate)
	}
	span := max(1, r.To-r.From)
	x := func(ms int64) float64 { return l + float64(w-l-rt)*float64(ms-r.From)/float64(span) }
	y := func(n int) float64 { return float64(h-b) - float64(h-t-b)*float64(n)/float64(most) }
	line := func(get func(Point) int) string {
		var pts []string
		for _, p := range r.Series {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(p.T), y(get(p))))
		}
		return strings.Join(pts, " ")
	}
	var s strings.Builder
	fmt.Fprintf(&s, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">`+"\n", w, h)
	fmt.Fprintf(&s, `<rect width="%d" height="%d" fill="#fff"/>`+"\n", w, h)
	fmt.Fprintf(&s, `<text x="%d" y="14">refusals per %v: active (solid), candidate (dashed)</text>`+"\n", l, time.Duration(r.Step)*time.Millisecond)
	for _, f := range []int{0, 1, 2} {
		n := most * f / 2
		fmt.Fprintf(&s, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#eee"/><text x="%d" y="%.1f" text-anchor="end" fill="#666">%d</text>`+"\n",
			l, w-rt, y(n), y(n), l-4, y(n)+4, n)
	}
	fmt.Fprintf(&s, `<text x="%d" y="%d" fill="#666">%s</text><text x="%d" y="%d" text-anchor="end" fill="#666">%s</text>`+"\n",
		l, h-8, time.UnixMilli(r.From).UTC().Format("15:04:05"), w-rt, h-8, time.UnixMilli(r.To).UTC().Format("15:04:05"))
	fmt.Fprintf(&s, `<polyline id="active" fill="none" stroke="#cf222e" stroke-width="1.5" points="%s"/>`+"\n", line(func(p Point) int { return p.Active }))
	fmt.Fprintf(&s, `<polyline id="candidate" fill="none" stroke="#0969da" stroke-width="1.5" stroke-dasharray="5 3" points="%s"/>`+"\n", line(func(p Point) int { return p.Candidate }))
	s.WriteString("</svg>\n")
	return s.String()
}
