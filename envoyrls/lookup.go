package envoyrls

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
)

// lookup finds the limit of a descriptor's entries, as
// envoyproxy/ratelimit does: at each level the entry's key and value,
// else the first wildcard value that matches, else the key alone; the
// limit applies only if it is at the level of the last entry. It appends
// the node matched at each level to buf.
func (d *Domain) lookup(entries []*rlv3.RateLimitDescriptor_Entry, buf []*node) (*Limit, []*node) {
	n := &d.root
	var lim *Limit
	for i, e := range entries {
		next := n.child(e)
		if next == nil {
			break
		}
		buf = append(buf, next)
		if next.limit != nil && i == len(entries)-1 {
			lim = next.limit
		}
		if len(next.children) == 0 {
			break
		}
		n = next
	}
	return lim, buf
}

// child is n's child that the entry e matches: the one of its key and
// value, else the first wildcard of its key that matches the value, else
// the one of its key alone; nil if none does.
func (n *node) child(e *rlv3.RateLimitDescriptor_Entry) *node {
	if c := n.children[entryKey{e.Key, e.Value}]; c != nil {
		return c
	}
	for _, w := range n.wildcards {
		if w.entry.key == e.Key && match(w.parts, e.Value) {
			return w
		}
	}
	return n.children[entryKey{e.Key, ""}]
}

// subjectEscaper writes the bytes that join a subject's values as %XX.
var subjectEscaper = strings.NewReplacer("%", "%25", "/", "%2F")

// subject is whose state of a descriptor's budget a request charges:
// rawSubject, or, when that is longer than maxSubject bytes or starts
// with "h:", "h:" and a digest of it. Values are request data (a header's,
// up to Envoy's 60 KiB of headers): bounded here, no value of any length
// reaches what is kept per subject (the stores' keys, the fallback's
// memory of Redis' answers, the deny cache), which bound how many
// subjects they keep, not how long each is. A raw subject never starts
// with "h:", so no value names another's digest.
func subject(entries []*rlv3.RateLimitDescriptor_Entry, nodes []*node) string {
	s := rawSubject(entries, nodes)
	if len(s) <= maxSubject && !strings.HasPrefix(s, "h:") {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	return "h:" + hex.EncodeToString(sum[:16])
}

// maxSubject is the longest subject kept as the request's values spell it.
const maxSubject = 64

// rawSubject is whose state of a descriptor's budget a request charges: its
// entries' values, each escaped and joined by '/', an entry matched by a
// share_threshold wildcard counting as the pattern, so that every value
// it matches shares one budget.
func rawSubject(entries []*rlv3.RateLimitDescriptor_Entry, nodes []*node) string {
	if len(entries) == 1 {
		v := subjectValue(entries, nodes, 0)
		if strings.ContainsAny(v, "%/") {
			return subjectEscaper.Replace(v)
		}
		return v
	}
	var sb strings.Builder
	for i := range entries {
		if i > 0 {
			sb.WriteByte('/')
		}
		subjectEscaper.WriteString(&sb, subjectValue(entries, nodes, i))
	}
	return sb.String()
}

// subjectValue is entry i's part of a subject: its value, or the pattern
// of the share_threshold wildcard it matched.
func subjectValue(entries []*rlv3.RateLimitDescriptor_Entry, nodes []*node, i int) string {
	if i < len(nodes) && nodes[i].shareThreshold {
		return nodes[i].entry.value
	}
	return entries[i].Value
}

// metricKey is the descriptor's key in the metrics, when it depends on
// the request: with detailed_metric, every entry's key_value (a
// share_threshold entry's pattern for its value); otherwise the
// configured path, with the request's value where a level has
// value_to_metric. Without either it is Limit.StatKey. As
// envoyproxy/ratelimit names them, a detailed key without share_threshold
// on its path is key_value at every level, even for an empty value
// ("key_"); otherwise a level with no value is its key alone.
func metricKey(domain string, lim *Limit, entries []*rlv3.RateLimitDescriptor_Entry, nodes []*node) string {
	detailed := lim.DetailedMetric
	for _, n := range nodes {
		detailed = detailed && !n.shareThreshold
	}
	var sb strings.Builder
	sb.WriteString(domain)
	for i, e := range entries {
		sb.WriteByte('.')
		sb.WriteString(e.Key)
		v := metricValue(lim, e, nodes[i])
		if v != "" || detailed {
			sb.WriteByte('_')
			sb.WriteString(v)
		}
	}
	return sb.String()
}

// metricValue is an entry's value in its metric key, matched at n: the
// request's with detailed_metric or value_to_metric, unless n is a
// share_threshold wildcard; else the configured one.
func metricValue(lim *Limit, e *rlv3.RateLimitDescriptor_Entry, n *node) string {
	if !n.shareThreshold && (lim.DetailedMetric || n.valueToMetric) {
		return e.Value
	}
	return n.entry.value
}

// dynamicMetric reports whether the metric key of a request matched
// through nodes depends on the request.
func dynamicMetric(lim *Limit, nodes []*node) bool {
	if lim.DetailedMetric {
		return true
	}
	for _, n := range nodes {
		if n.valueToMetric {
			return true
		}
	}
	return false
}
