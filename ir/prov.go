package ir

import "fmt"

// Role says what a value is to a training step. Autodiff and the optimizer pass set it on
// the values they make; every pass that copies a graph keeps it. Packages downstream read
// it, never the value's name: names are for people ("grad.w", "d.h", "w.m.next") and may be
// anything.
type Role uint8

const (
	// RoleForward is the zero Role: a value of the model itself (its forward ops, the loss,
	// params, inputs, state the model declares), or one no pass has marked.
	RoleForward Role = iota
	// RoleGrad is d loss / d Of for a value the gradient was asked for (a param): what the
	// optimizer reads. Named "grad.<Of>" by autodiff.
	RoleGrad
	// RoleAdjoint is d loss / d Of for any other value the loss depends on ("d.<Of>").
	RoleAdjoint
	// RoleAdjointPart is one contribution to the adjoint of Of, when Of feeds several
	// differentiated ops and their contributions are summed ("d.<Of>.<k>").
	RoleAdjointPart
	// RoleAdjointSum is a running sum of those contributions before the last ("d.<Of>.sum<k>").
	RoleAdjointSum
	// RoleBackward is a temporary inside the gradient rule of forward value Of
	// ("d.<Of>.<what>"), or, with Of = NoValue, a constant autodiff shares between rules.
	RoleBackward
	// RoleState is optimizer state of param Of (Slot names which: "m", "v"), or, with
	// Of = NoValue, state shared by every param (Adam's step counter, Slot "t").
	RoleState
	// RoleUpdate is an op of the optimizer's update of param Of, its new value included, or,
	// with Of = NoValue, one shared by every param (Adam's clock and bias corrections).
	RoleUpdate
	numRoles
)

var roleNames = [...]string{RoleForward: "forward", RoleGrad: "grad", RoleAdjoint: "adjoint", RoleAdjointPart: "adjoint_part",
	RoleAdjointSum: "adjoint_sum", RoleBackward: "backward", RoleState: "state", RoleUpdate: "update"}

func (r Role) String() string {
	if r < numRoles {
		return roleNames[r]
	}
	return fmt.Sprintf("role(%d)", uint8(r))
}

// ParseRole is the inverse of Role.String.
func ParseRole(s string) (Role, bool) {
	for r, n := range roleNames {
		if n == s {
			return Role(r), true
		}
	}
	return RoleForward, false
}

// Prov is a value's provenance: its Role and the value that role is relative to.
type Prov struct {
	Role Role
	// Of is the value this one is the gradient, adjoint, rule temporary, state or update
	// of; NoValue where the Role is shared (see Role) or where that value is not in this
	// graph (a stage cut out by passes.Subgraph). It is meaningless for RoleForward, whose
	// Prov is the zero value.
	Of ValueID
	// Slot names a state value within its param's state ("m", "v", "t"); empty otherwise.
	Slot string
}

// RoleOf builds a Prov.
func RoleOf(r Role, of ValueID) Prov { return Prov{Role: r, Of: of} }

// IsForward reports whether the value belongs to the model rather than to a pass.
func (p Prov) IsForward() bool { return p.Role == RoleForward }

// OfValue returns Of and true when the Role is relative to one value.
func (p Prov) OfValue() (ValueID, bool) {
	if p.Role == RoleForward || p.Of < 0 {
		return NoValue, false
	}
	return p.Of, true
}

// ByRole indexes the values of one role by the value they are relative to: out[x] is the
// first value with provenance (role, x), or NoValue. One pass over the graph.
func (g *Graph) ByRole(role Role) []ValueID {
	out := make([]ValueID, len(g.Values))
	for i := range out {
		out[i] = NoValue
	}
	for i := len(g.Values) - 1; i >= 0; i-- {
		if p := g.Values[i].Prov; p.Role == role && p.Role != RoleForward && p.Of >= 0 && int(p.Of) < len(out) {
			out[p.Of] = ValueID(i)
		}
	}
	return out
}

// GradOf returns the gradient of the loss with respect to value x (a param), as autodiff
// marked it, or false when the graph has none. It takes time linear in the graph: to ask
// for every param, index once with ByRole(RoleGrad).
func (g *Graph) GradOf(x ValueID) (ValueID, bool) {
	for i := range g.Values {
		if p := g.Values[i].Prov; p.Role == RoleGrad && p.Of == x {
			return ValueID(i), true
		}
	}
	return NoValue, false
}

// SetProv sets the provenance of value id. It panics if id is out of range.
func (g *Graph) SetProv(id ValueID, p Prov) { g.Value(id).Prov = p }

// CheckProv says what is wrong with giving value id of g provenance p, or nil. Of may
// name a later value: a stage cut out by passes.Subgraph brings a param in at its first
// use, which can follow its gradient.
func CheckProv(g *Graph, id ValueID, p Prov) error {
	switch {
	case p.Role >= numRoles:
		return fmt.Errorf("has unknown role %d", p.Role)
	case p.Role == RoleForward:
		return nil
	case p.Of != NoValue && (p.Of < 0 || int(p.Of) >= len(g.Values)):
		return fmt.Errorf("is the %s of value %d, which is not in the graph", p.Role, p.Of)
	case p.Of == id:
		return fmt.Errorf("cannot be the %s of itself", p.Role)
	}
	return nil
}

// verifyProv checks that a value's Of names an earlier value.
func verifyProv(g *Graph, id ValueID) *Error {
	v := &g.Values[id]
	if err := CheckProv(g, id, v.Prov); err != nil {
		return Errorf(v.Pos, "%s %v", v.Name, err)
	}
	return nil
}
