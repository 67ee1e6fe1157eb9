package policy

// Step is one check a call takes, in the order a route's Steps list them
// (see package engine): each step whose state can be given back comes
// before the one that cannot, the atomic charge, so that a refusal by any
// step gives back everything taken before it and charges nothing.
type Step uint8

// The steps, in the order they are taken.
const (
	// StepAdaptive takes a slot of the route's adaptive concurrency limit
	// (Route.Adaptive), held until the call ends. It comes first: it is
	// decided in the process, with no store call, so that the calls an
	// overloaded upstream sheds cost the store nothing.
	StepAdaptive Step = iota + 1
	// StepConcurrency takes a slot of the route's concurrency limit
	// (Route.Concurrency), held until the call ends.
	StepConcurrency
	// StepLogin holds the login guard's places (Route.Login) until the
	// service behind answers the attempt.
	StepLogin
	// StepGlobalHold holds a place in the route's global budget
	// (Route.Global, enforced), charged only if the charge admits.
	StepGlobalHold
	// StepCharge decides the subject's (and tenant's) limits in one
	// atomic call, all charged or none, and then charges a held global
	// place.
	StepCharge
	// StepShadow evaluates the shadow budgets once the call is answered.
	StepShadow
)

// UnmatchedSteps are the steps of a call that matches no route: its
// subject's plan, and the plan's budgets in shadow.
var UnmatchedSteps = []Step{StepCharge, StepShadow}

// steps compiles each route's steps from its features, after the shadow
// setting is applied: a feature a route lacks is no step of it.
func (c *compiler) steps(p *Policy) {
	for _, r := range p.Routes {
		if r.Adaptive != nil {
			r.Steps = append(r.Steps, StepAdaptive)
		}
		if r.Concurrency != nil {
			r.Steps = append(r.Steps, StepConcurrency)
		}
		if r.Login != nil {
			r.Steps = append(r.Steps, StepLogin)
		}
		if r.Global != nil && !r.Global.Shadow {
			r.Steps = append(r.Steps, StepGlobalHold)
		}
		r.Steps = append(r.Steps, StepCharge, StepShadow)
	}
}
