package tollgate

// Parked returns how many waiters of l wait in a line behind its head.
func Parked(l *Limiter) int {
	l.wait.mu.Lock()
	defer l.wait.mu.Unlock()
	n := 0
	for _, ln := range l.wait.lines {
		n += ln.waiters.Len() - 1
	}
	return n
}

// Lines returns how many subjects of l have waiters.
func Lines(l *Limiter) int {
	l.wait.mu.Lock()
	defer l.wait.mu.Unlock()
	return len(l.wait.lines)
}
