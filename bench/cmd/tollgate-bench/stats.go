package main

import (
	"sort"
	"time"
)

// latencies collects samples from many goroutines: each gets its own
// slice, merged at the end.
type latencies struct{ parts [][]time.Duration }

func (l *latencies) part(n int) []time.Duration { return make([]time.Duration, 0, n) }

func (l *latencies) add(p []time.Duration) { l.parts = append(l.parts, p) }

// summary is what a cell reports.
type summary struct {
	n              int
	p50, p99, p999 time.Duration
}

func (l *latencies) summary() summary {
	var all []time.Duration
	for _, p := range l.parts {
		all = append(all, p...)
	}
	if len(all) == 0 {
		return summary{}
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	q := func(f float64) time.Duration { return all[min(len(all)-1, int(f*float64(len(all))))] }
	return summary{n: len(all), p50: q(0.50), p99: q(0.99), p999: q(0.999)}
}

// summarize returns the percentiles of samples from any number of parts.
func summarize(parts ...[]time.Duration) summary {
	var l latencies
	for _, p := range parts {
		l.add(p)
	}
	return l.summary()
}

func ms(d time.Duration) string {
	return fmtFloat(float64(d.Microseconds())/1000, 2)
}

// repeats is how many times each cell of the store, memory, gateway and
// rls tables runs, the implementations in turn; the tables report medians.
// The mode sets it.
var repeats = 3

// median returns the median of f over rows.
func median[T any](rows []T, f func(T) float64) float64 {
	v := make([]float64, len(rows))
	for i, r := range rows {
		v[i] = f(r)
	}
	sort.Float64s(v)
	return v[len(v)/2]
}

// medianLatency returns the median of each percentile of lat over rows.
func medianLatency[T any](rows []T, lat func(T) summary) summary {
	s := lat(rows[0])
	s.p50 = time.Duration(median(rows, func(r T) float64 { return float64(lat(r).p50) }))
	s.p99 = time.Duration(median(rows, func(r T) float64 { return float64(lat(r).p99) }))
	s.p999 = time.Duration(median(rows, func(r T) float64 { return float64(lat(r).p999) }))
	return s
}
