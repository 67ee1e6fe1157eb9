package algo

import "fmt"

// CloneLog returns a deep copy of g, for tests.
func CloneLog(g *Log) *Log { return g.Clone() }

// LogString renders g's entries, oldest first, for tests.
func LogString(g *Log) string {
	if g == nil {
		return ""
	}
	s := ""
	for i := 0; i < g.n; i++ {
		s += fmt.Sprintf("%d:%d ", g.ts[g.at(i)], g.cost[g.at(i)])
	}
	return s
}

// Civil and DaysFromCivil expose the calendar arithmetic to tests.
var (
	Civil         = civil
	DaysFromCivil = daysFromCivil
)
