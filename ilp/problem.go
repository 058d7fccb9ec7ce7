package ilp

import (
	"errors"
	"fmt"
	"math"
)

// VarID names a variable of a Problem: its index in Problem.Vars and in
// Solution.Values.
type VarID int32

// RowID names a row (constraint) of a Problem: its index in Problem.Rows.
type RowID int32

// VarKind says which values a variable may take.
type VarKind uint8

const (
	// Continuous variables take any real value within their bounds.
	Continuous VarKind = iota
	// Integer variables take integral values within their bounds.
	Integer
	// Binary variables take 0 or 1; their bounds are always [0, 1].
	Binary
)

// String returns the kind's name as WriteLP prints it.
func (k VarKind) String() string {
	switch k {
	case Continuous:
		return "continuous"
	case Integer:
		return "integer"
	case Binary:
		return "binary"
	}
	return fmt.Sprintf("VarKind(%d)", uint8(k))
}

// Sense is the comparison of a row's left-hand side with its right-hand side.
// The zero value is invalid so that a forgotten sense is caught by Validate.
type Sense uint8

const (
	// LE is lhs <= rhs.
	LE Sense = iota + 1
	// GE is lhs >= rhs.
	GE
	// EQ is lhs = rhs.
	EQ
)

// String returns the sense as an operator: "<=", ">=" or "=".
func (s Sense) String() string {
	switch s {
	case LE:
		return "<="
	case GE:
		return ">="
	case EQ:
		return "="
	}
	return fmt.Sprintf("Sense(%d)", uint8(s))
}

// Term is one coefficient times one variable in a row or the objective.
type Term struct {
	Var  VarID
	Coef float64
}

// Var describes one variable. Lo and Hi may be infinite (math.Inf) for
// continuous and integer variables.
type Var struct {
	Name   string
	Kind   VarKind
	Lo, Hi float64
}

// Row is one linear constraint: Σ Terms Sense RHS. A variable may appear in
// several terms of a row; its coefficients add up.
type Row struct {
	Name  string
	Terms []Term
	Sense Sense
	RHS   float64
}

// Problem is a mixed-integer linear program: minimize Objective·x +
// ObjConstant subject to Rows and the bounds and kinds of Vars.
//
// It is plain data: the fields may be read, and built directly, as well as
// through the Add methods. The Add methods never fail; Validate (also called
// by Solve) reports malformed input. The zero value is an empty problem.
type Problem struct {
	Vars        []Var
	Rows        []Row
	Objective   []Term
	ObjConstant float64

	// arena backs the Terms of rows added by AddRow so that building a model
	// of many small rows costs few allocations.
	arena []Term
}

// AddBinary adds a 0/1 variable and returns its ID.
func (p *Problem) AddBinary(name string) VarID {
	return p.addVar(Var{Name: name, Kind: Binary, Lo: 0, Hi: 1})
}

// AddInteger adds an integral variable within [lo, hi] and returns its ID.
// The bounds may be infinite.
func (p *Problem) AddInteger(name string, lo, hi float64) VarID {
	return p.addVar(Var{Name: name, Kind: Integer, Lo: lo, Hi: hi})
}

// AddContinuous adds a real variable within [lo, hi] and returns its ID. The
// bounds may be infinite: AddContinuous("x", math.Inf(-1), math.Inf(1)) is a
// free variable.
func (p *Problem) AddContinuous(name string, lo, hi float64) VarID {
	return p.addVar(Var{Name: name, Kind: Continuous, Lo: lo, Hi: hi})
}

func (p *Problem) addVar(v Var) VarID {
	p.Vars = append(p.Vars, v)
	return VarID(len(p.Vars) - 1)
}

// AddRow adds the constraint Σ terms sense rhs and returns its ID. The terms
// are copied, so the caller may reuse its slice for the next row.
func (p *Problem) AddRow(name string, terms []Term, sense Sense, rhs float64) RowID {
	start := len(p.arena)
	p.arena = append(p.arena, terms...)
	own := p.arena[start:len(p.arena):len(p.arena)]
	p.Rows = append(p.Rows, Row{Name: name, Terms: own, Sense: sense, RHS: rhs})
	return RowID(len(p.Rows) - 1)
}

// SetObjective sets the objective to minimize: Σ terms + constant. The terms
// are copied; a variable may appear more than once.
func (p *Problem) SetObjective(terms []Term, constant float64) {
	p.Objective = append([]Term(nil), terms...)
	p.ObjConstant = constant
}

// NumVars returns the number of variables.
func (p *Problem) NumVars() int { return len(p.Vars) }

// NumRows returns the number of rows, bounds and the objective not counted.
func (p *Problem) NumRows() int { return len(p.Rows) }

// NumNonzeros returns the number of terms over all rows, the objective not
// counted.
func (p *Problem) NumNonzeros() int {
	n := 0
	for i := range p.Rows {
		n += len(p.Rows[i].Terms)
	}
	return n
}

// VarName returns the variable's name, or "x<id>" when it has none, so that
// messages always name something.
func (p *Problem) VarName(v VarID) string {
	if int(v) >= 0 && int(v) < len(p.Vars) && p.Vars[v].Name != "" {
		return p.Vars[v].Name
	}
	return fmt.Sprintf("x%d", v)
}

// RowName returns the row's name, or "r<id>" when it has none.
func (p *Problem) RowName(r RowID) string {
	if int(r) >= 0 && int(r) < len(p.Rows) && p.Rows[r].Name != "" {
		return p.Rows[r].Name
	}
	return fmt.Sprintf("r%d", r)
}

// Validate reports every malformed piece of the problem, joined into one
// error (nil when the problem is well formed): unknown kinds and senses,
// NaN bounds, lo > hi, a binary variable whose bounds are not [0, 1], terms
// naming unknown variables, NaN or infinite coefficients and right-hand sides.
func (p *Problem) Validate() error {
	var errs []error
	for i := range p.Vars {
		errs = p.checkVar(errs, VarID(i))
	}
	errs = p.checkTerms(errs, "objective", p.Objective)
	if !finite(p.ObjConstant) {
		errs = append(errs, fmt.Errorf("ilp: objective constant is %v", p.ObjConstant))
	}
	for i := range p.Rows {
		errs = p.checkRow(errs, RowID(i))
	}
	return errors.Join(errs...)
}

func (p *Problem) checkVar(errs []error, id VarID) []error {
	v, name := p.Vars[id], p.VarName(id)
	switch {
	case v.Kind > Binary:
		errs = append(errs, fmt.Errorf("ilp: var %s has unknown kind %d", name, v.Kind))
	case math.IsNaN(v.Lo) || math.IsNaN(v.Hi):
		errs = append(errs, fmt.Errorf("ilp: var %s has a NaN bound", name))
	case v.Lo > v.Hi:
		errs = append(errs, fmt.Errorf("ilp: var %s has lo %g > hi %g", name, v.Lo, v.Hi))
	case math.IsInf(v.Lo, 1) || math.IsInf(v.Hi, -1):
		errs = append(errs, fmt.Errorf("ilp: var %s has empty bounds [%g, %g]", name, v.Lo, v.Hi))
	case v.Kind == Binary && (v.Lo != 0 || v.Hi != 1):
		errs = append(errs, fmt.Errorf("ilp: binary var %s has bounds [%g, %g], want [0, 1]", name, v.Lo, v.Hi))
	}
	return errs
}

func (p *Problem) checkRow(errs []error, id RowID) []error {
	r := &p.Rows[id]
	where := "row " + p.RowName(id)
	if r.Sense < LE || r.Sense > EQ {
		errs = append(errs, fmt.Errorf("ilp: %s has unknown sense %d", where, r.Sense))
	}
	if !finite(r.RHS) {
		errs = append(errs, fmt.Errorf("ilp: %s has rhs %v", where, r.RHS))
	}
	return p.checkTerms(errs, where, r.Terms)
}

func (p *Problem) checkTerms(errs []error, where string, terms []Term) []error {
	for i, t := range terms {
		if t.Var < 0 || int(t.Var) >= len(p.Vars) {
			errs = append(errs, fmt.Errorf("ilp: %s term %d names unknown var %d (have %d vars)", where, i, t.Var, len(p.Vars)))
		} else if !finite(t.Coef) {
			errs = append(errs, fmt.Errorf("ilp: %s term %d has coefficient %v for %s", where, i, t.Coef, p.VarName(t.Var)))
		}
	}
	return errs
}

func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }
