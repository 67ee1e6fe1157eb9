package policy

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/algo"
)

// Store names. Every name under which the store keeps a policy's state is
// built in this file, and nowhere else:
//
//	plan/<plan>@<hash>           a plan's one limit (Plan.Limits[0])
//	plan/<plan>/<limit>@<hash>   one of a plan's several limits
//	plan/<plan>/<limit>~<unit>@<hash>  one of them counting tokens (Budget.Unit)
//	tenant/<plan>@<hash>         a plan's one tenant budget (Plan.Tenant[0])
//	tenant/<plan>/<limit>@<hash>  one of a plan's several tenant budgets, ~<unit> as above
//	route/<group>@<hash>         a route group's own limit (Route.Limit)
//	global/<group>@<hash>        a route group's global budget (Route.Global)
//	candidate/<group>@<hash>     a route group's shadow_limit (Route.Candidate)
//	invalid_key@<hash>           the per-IP invalid-key limit (Policy.InvalidKey)
//	login_ip/<group>@<hash>      a login guard's failures per IP (Login.IPFailures)
//	login/<group>                a login guard's accounts (Login.StoreName)
//	concurrency/<group>          a concurrency limit's leases (Concurrency.StoreName)
//	rls/<domain>/<path>@<hash>   a rate limit of Envoy's rate-limit service (RLSBudget)
//
// A budget's name is its kind (its BudgetRole) and names, its id, which
// no two budgets share (names hold no '/' or '@', see namePattern), and
// the hash of its limit (storeName); never the policy's version: see
// Budget.StoreName.
// The guard state of logins and the leases of concurrency limits record
// what happened, whatever the rule, so their names hold no limit.

// storeID joins a kind and its names into an id: "plan/free".
func storeID(kind string, names ...string) string {
	return strings.Join(append([]string{kind}, names...), "/")
}

// unitID is id for a budget of unit u: a budget counting tokens keeps
// its state apart from one counting requests.
func unitID(id string, u Unit) string {
	if u == UnitRequests {
		return id
	}
	return id + "~" + u.String()
}

// routeID is the id of a route group's own limit.
func routeID(group string) string { return storeID(string(RoleRoute), group) }

// globalID is the id of a route group's global budget.
func globalID(group string) string { return storeID(string(RoleGlobal), group) }

// candidateID is the id of a route group's candidate (shadow_limit).
func candidateID(group string) string { return storeID(string(RoleCandidate), group) }

// invalidKeyID is the id of the per-IP invalid-key limit.
func invalidKeyID() string { return storeID(string(RoleInvalidKey)) }

// loginIPID is the id of a login guard's failures per IP.
func loginIPID(group string) string { return storeID(string(RoleLoginIP), group) }

// loginStoreName names a login guard's account state.
func loginStoreName(group string) string { return storeID("login", group) }

// concurrencyStoreName names a concurrency limit's leases.
func concurrencyStoreName(group string) string { return storeID("concurrency", group) }

// storeName returns "<id>@<hash>", the hash being the first 10 hex digits
// (40 bits) of the SHA-256 of the limit's [tollgate.LimitName], which
// differs for limits that enforce anything differently: a changed limit
// keeps its old state only if the hashes collide, once in 2^40 changes.
// The hash keeps keys as short as "<version>:plan:free" made them with a
// 10-character version, so a store holds as many.
func storeName(id string, l tollgate.Limit) string {
	sum := sha256.Sum256([]byte(tollgate.LimitName(l)))
	return id + "@" + hex.EncodeToString(sum[:5])
}

// RoleRLS is a rate limit of Envoy's rate-limit service (package
// envoyrls): a descriptor of a domain, per descriptor value. It is the
// kind that begins its store name; such budgets are not part of a Policy.
const RoleRLS BudgetRole = "rls"

// RLSEntry is one level of a descriptor's path in an Envoy rate-limit
// configuration: its key and, if the level names one, its value (a value
// ending in '*' is the wildcard as written).
type RLSEntry struct {
	Key, Value string
}

// RLSBudget returns the budget of a rate limit of Envoy's rate-limit
// service: the descriptor at path in domain, enforcing l, shown as name in
// headers and metrics. Its store name is
//
//	rls/<domain>/<key>[=<value>]/...@<hash>
//
// with '%', '/', '=' and '@' in the domain, keys and values written %25,
// %2F, %3D and %40, so that no two descriptors share a name whatever they
// hold (Envoy's own key_value spelling is ambiguous). The hash is the
// limit's (see storeName): a changed requests_per_unit, unit or algorithm
// starts the descriptor afresh, and shadow mode is not part of it.
func RLSBudget(name, domain string, path []RLSEntry, l tollgate.Limit, shadow bool) (*Budget, error) {
	parts := []string{rlsEscape(domain)}
	for _, e := range path {
		p := rlsEscape(e.Key)
		if e.Value != "" {
			p += "=" + rlsEscape(e.Value)
		}
		parts = append(parts, p)
	}
	b := newBudget(name, storeID(string(RoleRLS), parts...), l, shadow)
	h, err := algo.NewHandle(b.StoreName, l)
	if err != nil {
		return nil, err
	}
	b.Handle = h
	return b, nil
}

// rlsEscaper writes the bytes that delimit an RLS store name's parts as
// %XX.
var rlsEscaper = strings.NewReplacer("%", "%25", "/", "%2F", "=", "%3D", "@", "%40")

func rlsEscape(s string) string { return rlsEscaper.Replace(s) }

// RouteKeyID is the id a route limit's store subject is made of when the
// limit is counted per LimitKey (Route.KeyValues): each part's kind and
// name, and its value with its length, so that no two lists of values
// share an id, whatever bytes they hold. The engine pseudonymises it
// (kind "rk") as it does every subject, so no value reaches a store key,
// a log line or a metric label.
func RouteKeyID(parts []KeyPart, values []string) string {
	var b strings.Builder
	for i, k := range parts {
		v := ""
		if i < len(values) {
			v = values[i]
		}
		b.WriteString(k.String())
		b.WriteByte('=')
		b.WriteString(strconv.Itoa(len(v)))
		b.WriteByte(':')
		b.WriteString(v)
		b.WriteByte(';')
	}
	return b.String()
}
