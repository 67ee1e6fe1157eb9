package llm

// Held is how many bytes m holds.
func (m *Meter) Held() int {
	if m.pick != nil {
		return cap(m.buf) + cap(m.pick.buf)
	}
	return cap(m.buf)
}

// Limit is the most m may hold.
func (m *Meter) Limit() int { return m.limit }
