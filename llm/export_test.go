package llm

// Held is how many bytes m holds.
func (m *Meter) Held() int { return cap(m.buf) }

// Limit is the most m may hold.
func (m *Meter) Limit() int { return m.limit }
