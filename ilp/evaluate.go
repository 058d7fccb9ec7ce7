package ilp

import (
	"fmt"
	"math"
	"strings"
)

// DefaultTolerance is Evaluate's tolerance: a row counts as violated when it is
// off by more than DefaultTolerance·max(1, |rhs|, max_i |a_i·x_i|) — its scale,
// the largest of its right-hand side and its terms at the point —, a bound when it
// is off by more than DefaultTolerance·max(1, |bound|), a value is non-integral
// when it is more than DefaultTolerance from an integer. It is looser than
// lp_solve's own feasibility tolerances so that the solver's answers pass. A
// row's terms count because a row with right-hand side 0 and terms of 10¹²
// (the sharding pass's min-peak rows, peak − Σ bytes·s ≥ 0) cannot be met to
// better than their rounding, ~10⁻⁴ at that size: lp_solve returns such a peak
// a few ulps under the sum (ilp/testdata/minpeak.json, TestMinPeakRowIsFeasibleAtItsScale).
const DefaultTolerance = 1e-6

// RowViolation is a row whose left-hand side misses its right-hand side.
type RowViolation struct {
	Row    RowID
	Name   string
	LHS    float64
	Sense  Sense
	RHS    float64
	Amount float64 // how far LHS is on the wrong side, > 0
}

func (v RowViolation) String() string {
	return fmt.Sprintf("row %s: lhs %g %s %g violated by %g", v.Name, v.LHS, v.Sense, v.RHS, v.Amount)
}

// BoundViolation is a variable outside [Lo, Hi].
type BoundViolation struct {
	Var    VarID
	Name   string
	Value  float64
	Lo, Hi float64
	Amount float64 // distance to the nearest bound, > 0
}

func (v BoundViolation) String() string {
	return fmt.Sprintf("var %s: %g outside [%g, %g] by %g", v.Name, v.Value, v.Lo, v.Hi, v.Amount)
}

// IntegralityViolation is a binary or integer variable with a fractional
// value.
type IntegralityViolation struct {
	Var    VarID
	Name   string
	Value  float64
	Amount float64 // distance to the nearest integer, > 0
}

func (v IntegralityViolation) String() string {
	return fmt.Sprintf("var %s: %g is not integral (off by %g)", v.Name, v.Value, v.Amount)
}

// Evaluation is what Evaluate finds out about an assignment.
type Evaluation struct {
	// Objective is Σ Objective·values + ObjConstant.
	Objective   float64
	Rows        []RowViolation
	Bounds      []BoundViolation
	Integrality []IntegralityViolation
	// Invalid is set, and nothing else is, when the problem is malformed
	// or values has the wrong length.
	Invalid error
}

// Feasible reports whether the assignment violates nothing.
func (e *Evaluation) Feasible() bool { return e.Err() == nil }

// Err returns nil for a feasible assignment, otherwise an error listing
// every violation, one per line, so a test can require.NoError(t, ev.Err()).
func (e *Evaluation) Err() error {
	if e.Invalid != nil {
		return e.Invalid
	}
	var lines []string
	for _, v := range e.Rows {
		lines = append(lines, v.String())
	}
	for _, v := range e.Bounds {
		lines = append(lines, v.String())
	}
	for _, v := range e.Integrality {
		lines = append(lines, v.String())
	}
	if len(lines) == 0 {
		return nil
	}
	return fmt.Errorf("ilp: %d violations:\n%s", len(lines), strings.Join(lines, "\n"))
}

// Evaluate recomputes the objective of values (indexed by VarID) and lists
// every violated row, bound and integrality requirement, with
// DefaultTolerance. It shares no code with Solve's backend, so it is the
// check to run on any assignment, the solver's own included.
func Evaluate(p *Problem, values []float64) Evaluation {
	return EvaluateTol(p, values, DefaultTolerance)
}

// EvaluateTol is Evaluate with a chosen tolerance (see DefaultTolerance for
// how it scales).
func EvaluateTol(p *Problem, values []float64, tol float64) Evaluation {
	if err := p.Validate(); err != nil {
		return Evaluation{Invalid: err}
	}
	if len(values) != len(p.Vars) {
		return Evaluation{Invalid: fmt.Errorf("ilp: got %d values for %d vars", len(values), len(p.Vars))}
	}
	e := Evaluation{Objective: objective(p, values)}
	for i := range p.Rows {
		e.checkRow(p, RowID(i), values, tol)
	}
	for i := range p.Vars {
		e.checkVar(p, VarID(i), values[i], tol)
	}
	return e
}

func (e *Evaluation) checkRow(p *Problem, id RowID, values []float64, tol float64) {
	r := &p.Rows[id]
	lhs, scale := 0.0, math.Max(1, math.Abs(r.RHS))
	for _, t := range r.Terms {
		x := t.Coef * values[t.Var]
		lhs += x
		scale = math.Max(scale, math.Abs(x))
	}
	var amount float64
	switch r.Sense {
	case LE:
		amount = lhs - r.RHS
	case GE:
		amount = r.RHS - lhs
	case EQ:
		amount = math.Abs(lhs - r.RHS)
	}
	if !finite(lhs) {
		amount = math.Inf(1)
	}
	if amount > tol*scale || math.IsInf(amount, 1) { // a NaN term makes scale NaN
		e.Rows = append(e.Rows, RowViolation{Row: id, Name: p.RowName(id), LHS: lhs,
			Sense: r.Sense, RHS: r.RHS, Amount: amount})
	}
}

func (e *Evaluation) checkVar(p *Problem, id VarID, x, tol float64) {
	v := p.Vars[id]
	amount := math.Max(v.Lo-x, x-v.Hi)
	if !finite(x) {
		amount = math.Inf(1) // no bound admits NaN, and no variable is infinite
	}
	if amount > tol*math.Max(1, boundScale(x, v)) {
		e.Bounds = append(e.Bounds, BoundViolation{Var: id, Name: p.VarName(id), Value: x,
			Lo: v.Lo, Hi: v.Hi, Amount: amount})
	}
	if v.Kind == Continuous || !finite(x) {
		return
	}
	if amount := math.Abs(x - math.Round(x)); amount > tol {
		e.Integrality = append(e.Integrality, IntegralityViolation{Var: id, Name: p.VarName(id),
			Value: x, Amount: amount})
	}
}

// boundScale is the magnitude of the bound x is closest to violating.
func boundScale(x float64, v Var) float64 {
	if x < v.Lo {
		return math.Abs(v.Lo)
	}
	return math.Abs(v.Hi)
}
