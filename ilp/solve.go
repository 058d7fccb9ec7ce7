package ilp

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"
)

// Sentinel outcomes of Solve; test them with errors.Is.
var (
	// ErrInfeasible: no assignment satisfies every row, bound and kind.
	ErrInfeasible = errors.New("ilp: problem is infeasible")
	// ErrUnbounded: the objective decreases without bound.
	ErrUnbounded = errors.New("ilp: problem is unbounded")
	// ErrTimeout: the time limit or the iteration limit ran out before
	// optimality was proven. Solve may return a feasible Solution alongside it
	// (see Solve).
	ErrTimeout = errors.New("ilp: search limit reached")
)

// Options tune Solve.
type Options struct {
	// TimeLimit bounds the CPU time of lp_solve's search, measured on the
	// thread that runs it (model building, linear in the model's size, is not
	// counted); zero or negative means no limit. CPU time rather than wall time,
	// so that other work on the machine does not move the stop; it still varies
	// from machine to machine, so use it as a backstop behind Iterations where
	// the answer must be reproducible.
	TimeLimit time.Duration
	// Iterations bounds the search by effort instead: lp_solve stops once it has
	// made this many simplex iterations (branch and bound included); zero or
	// negative means no limit. Unlike a time limit, the point where it stops,
	// and so the answer, depends on the problem alone, not on the machine or
	// its load: the same problem gives the same Solution and error every time.
	// With both limits, the first reached stops the search.
	Iterations int64
	// Start, if set, is the basis lp_solve's simplex starts from (basis.go): typically
	// the Basis of an earlier Solution of this problem before its right-hand sides
	// changed or rows and variables were appended to it. It changes the search's path,
	// not the objective it proves optimal.
	Start *Basis
	// Incumbent, if set, is a feasible point of the problem known before the solve (one
	// value per variable; Evaluate must find it feasible), typically a heuristic's plan.
	// lp_solve's branch and bound then looks only for points better than it (its
	// objective is the cutoff: set_obj_bound), so it prunes every node whose bound does
	// not beat it. Solve returns the incumbent itself, Status Optimal, when lp_solve
	// proves that nothing better exists (within its MIP gaps, as for any optimum); at a
	// limit, the better of the incumbent and lp_solve's best point (the incumbent on a
	// tie), Status Feasible. The answer is a function of the problem, the options and the
	// incumbent. It does not apply to a problem without integer variables.
	Incumbent []float64
}

// Status says how good a returned Solution is.
type Status uint8

const (
	// Optimal: lp_solve proved the solution optimal (within its default
	// MIP gaps, 1e-11 absolute and 1e-9 relative).
	Optimal Status = iota
	// Feasible: the solution satisfies the problem but the search stopped
	// (time limit or cancellation) before proving it optimal.
	Feasible
)

// String returns "optimal" or "feasible".
func (s Status) String() string {
	switch s {
	case Optimal:
		return "optimal"
	case Feasible:
		return "feasible"
	}
	return fmt.Sprintf("Status(%d)", uint8(s))
}

// Solution is an assignment found by Solve.
type Solution struct {
	// Values holds one value per variable, indexed by VarID. Values of
	// binary and integer variables are exact integers, and continuous values
	// within 1e-6 of a bound are snapped onto it, so they can be compared
	// and used as indices directly.
	Values []float64
	// Objective is Σ Objective·Values + ObjConstant recomputed from Values.
	Objective float64
	Status    Status
	// Basis is the optimal basis of the problem's LP relaxation when that optimum was
	// integral (no branching), to start a later solve of this problem changed
	// (Options.Start); nil otherwise: after branching, lp_solve's last basis is a
	// subproblem's.
	Basis *Basis
}

// Value returns the value of v.
func (s *Solution) Value(v VarID) float64 { return s.Values[v] }

// snapTol is how far from an integer (or a bound) lp_solve's answer may be
// and still be snapped onto it; lp_solve's own integrality tolerance is 1e-7.
const snapTol = 1e-6

// Solve minimizes p with lp_solve.
//
// Outcomes:
//   - proven optimum: a Solution with Status Optimal and a nil error;
//   - infeasible or unbounded: nil and an error wrapping ErrInfeasible or
//     ErrUnbounded;
//   - time or iteration limit reached: an error wrapping ErrTimeout, with a
//     Solution of Status Feasible when lp_solve had found a feasible point
//     (its best one), nil otherwise;
//   - ctx done before the search: nil and ctx.Err(); ctx done during it:
//     ctx.Err() (wrapped) and, like a timeout, the best feasible Solution
//     found so far or nil;
//   - a malformed Problem: nil and Validate's error;
//   - anything else lp_solve reports: nil and an error naming its code.
//
// Solve does not modify p and is safe to call concurrently on different or
// identical problems.
func Solve(ctx context.Context, p *Problem, opts Options) (*Solution, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if len(p.Vars) == 0 {
		return solveConstant(p) // lp_solve refuses a model without columns
	}
	if opts.Incumbent != nil {
		if len(opts.Incumbent) != len(p.Vars) {
			return nil, fmt.Errorf("ilp: incumbent has %d values for %d variables", len(opts.Incumbent), len(p.Vars))
		}
		if ev := Evaluate(p, opts.Incumbent); !ev.Feasible() {
			return nil, fmt.Errorf("ilp: incumbent is not feasible: %w", ev.Err())
		}
	}
	k := keyOf(p, opts, defaultTuning)
	e, mine, err := memo.lookup(ctx, k)
	if err != nil {
		return nil, err
	}
	if !mine {
		sol, err := e.answer()
		traced(p, Stats{Vars: len(p.Vars), Rows: len(p.Rows), Limit: opts.TimeLimit, Cached: true, Warm: opts.Start != nil, Err: err})
		return sol, err
	}
	var sol *Solution
	reusable := false
	defer func() { memo.finish(k, e, sol, err, reusable) }() // also when solving panics
	sol, reusable, err = solve(ctx, p, opts)
	return sol, err
}

// solve builds and solves p with lp_solve; reusable says whether the answer depends on the
// problem alone (see cacheable).
//
// A problem with integer variables is searched under two branching rules in turn
// (docs/DECISIONS.md, "lp_solve settings over a recorded corpus"): first under
// tuning.firstRule within a branching allowance — as many simplex iterations again as the
// root relaxation took, at least bbAllowanceMin, counted from the first branch — then,
// if that did not settle it, afresh under tuning.bbRule with what is left of the limits,
// keeping the better feasible point of the two. Both stops are counted in iterations, so
// the answer is still a function of the problem and the options.
func solve(ctx context.Context, p *Problem, opts Options) (sol *Solution, reusable bool, err error) {
	st := Stats{Vars: len(p.Vars), Rows: len(p.Rows), Limit: opts.TimeLimit, Warm: opts.Start != nil}
	defer func() {
		st.Err = err
		traced(p, st)
	}()
	t := defaultTuning
	if !hasIntegers(p) {
		return run(ctx, p, opts, limits{opts.TimeLimit, opts.Iterations, 0}, &t, nil, &st)
	}
	st.Rules = 1
	var inc *Solution // the incumbent: prior of the first run, its cutoff
	if opts.Incumbent != nil {
		vals := append([]float64(nil), opts.Incumbent...)
		inc = &Solution{Values: vals, Objective: objective(p, vals), Status: Feasible}
		st.Incumbent = opts.Incumbent
	}
	if t.firstRule < 0 {
		return run(ctx, p, opts, limits{opts.TimeLimit, opts.Iterations, 0}, &t, inc, &st)
	}
	first := t
	first.bbRule = t.firstRule
	lim := limits{opts.TimeLimit, opts.Iterations, bbAllowanceMin}
	sol, reusable, err = run(ctx, p, opts, lim, &first, inc, &st)
	if !errors.Is(err, errGaveUp) {
		return sol, reusable, err
	}
	// What is left of the limits; > 0, as the allowance struck first.
	if opts.Iterations > 0 {
		lim.iters = max(opts.Iterations-st.Iterations, 1)
	}
	if opts.TimeLimit > 0 {
		lim.time = max(opts.TimeLimit-st.CPU, time.Nanosecond)
	}
	lim.bbMin = 0
	t.scaleRows, t.noCutoff = first.scaleRows, first.noCutoff
	st.Rules = 2
	return run(ctx, p, opts, lim, &t, sol, &st)
}

// errGaveUp: the branching allowance stopped the first rule's search (see solve).
var errGaveUp = errors.New("ilp: branching allowance spent")

// bbAllowanceMin is the least branching allowance of the first rule, in simplex iterations
// (a variable for the tests).
var bbAllowanceMin int64 = 1000

func hasIntegers(p *Problem) bool {
	for _, v := range p.Vars {
		if v.Kind != Continuous {
			return true
		}
	}
	return false
}

// limits are what stops one lp_solve run: CPU time, simplex iterations (0: none) and the
// branching allowance (see solve; 0: none).
type limits struct {
	time         time.Duration
	iters, bbMin int64
}

// run solves p under *t within lim, retrying scaled when lp_solve fails numerically
// (t.scaleRows is then set); prior, if set, is a feasible point found before, returned
// instead of a worse one when the search stops early, and with opts.Incumbent set also
// the search's cutoff (see Options.Incumbent). Errors name opts' limits.
func run(ctx context.Context, p *Problem, opts Options, lim limits, t *tuning, prior *Solution, st *Stats) (*Solution, bool, error) {
	for {
		sol, reusable, retry, err := attempt(ctx, p, opts, lim, *t, prior, st)
		if !retry {
			return sol, reusable, err
		}
		if opts.Incumbent != nil && prior != nil && !t.noCutoff {
			// lp_solve failed numerically with the cutoff (it does when the cutoff is at or
			// below the optimum on some problems): solve without it, keeping the incumbent
			// as prior. A function of the problem and the incumbent, as the failure is.
			t.noCutoff, st.Incumbent = true, nil
			continue
		}
		// lp_solve's own scaling failed on this problem's range of numbers: solve it again
		// scaled exactly (scale.go). The failure, and so the retry, is a function of the
		// problem.
		t.scaleRows = true
	}
}

// attempt is one lp_solve run of p under t, its effort added to st; retry says that it
// failed numerically and a scaled run may succeed.
func attempt(ctx context.Context, p *Problem, opts Options, lim limits, t tuning, prior *Solution, st *Stats) (*Solution, bool, bool, error) {
	start := time.Now()
	m, err := build(p, t)
	if err != nil {
		return nil, false, false, err
	}
	defer m.free()
	if opts.Start != nil {
		b, err := opts.Start.extend(p)
		if err == nil {
			err = m.setBasis(b)
		}
		if err != nil {
			return nil, false, false, err
		}
	}
	cutoff := opts.Incumbent != nil && prior != nil && !t.noCutoff
	if cutoff {
		m.setCutoff(prior.Objective - p.ObjConstant)
	}
	built := time.Now()
	code := solveWatched(ctx, m, lim)
	cpu, iters, nodes := m.effort()
	st.Build += built.Sub(start)
	st.Wall += time.Since(built)
	st.CPU += cpu
	st.Iterations += iters
	st.Nodes += nodes
	if (code == lpNumFailure || code == lpAccuracy) && (!t.scaleRows || cutoff) && ctx.Err() == nil {
		return nil, false, true, nil
	}
	if cutoff && (code == lpInfeasible || code == lpOptimal && m.solutionCount() == 0) {
		// Nothing beats the cutoff: the point it came from is optimal.
		sol := *prior
		sol.Status = Optimal
		return &sol, true, false, nil
	}
	sol, err := result(ctx, p, m, code, opts, prior)
	if cutoff && err == nil && sol != nil && prior.Objective <= sol.Objective {
		sol = &Solution{Values: prior.Values, Objective: prior.Objective, Status: Optimal} // lp_solve's answer ties the cutoff
	}
	return sol, cacheable(sol, err, m), false, err
}

// build loads p into a fresh lp_solve model. On error the model is already
// freed.
func build(p *Problem, t tuning) (*lpModel, error) {
	m, err := newLPModel(len(p.Vars))
	if err != nil {
		return nil, err
	}
	m.tune(t)
	if t.scaleRows {
		m.colExp = colExponents(p)
	}
	if err := load(m, p); err != nil {
		m.free()
		return nil, err
	}
	return m, nil
}

func load(m *lpModel, p *Problem) error {
	for i := range p.Vars {
		if err := m.setColumn(i, p.Vars[i]); err != nil {
			return err
		}
	}
	if err := m.setObjective(p.Objective); err != nil {
		return err
	}
	if err := m.setRowMode(true); err != nil {
		return err
	}
	for i := range p.Rows {
		if err := m.addRow(&p.Rows[i]); err != nil {
			return fmt.Errorf("%w (row %s)", err, p.RowName(RowID(i)))
		}
	}
	return m.setRowMode(false)
}

// solveWatched runs the solve while a context.AfterFunc watches ctx, and
// returns only once the watcher can no longer touch the model.
func solveWatched(ctx context.Context, m *lpModel, lim limits) int {
	done := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(done)
		m.cancel()
	})
	code := m.solve(lim.time, lim.iters, lim.bbMin)
	if !stop() {
		<-done // the watcher started: wait until it is finished with m
	}
	return code
}

// result turns lp_solve's return code into Solve's outcome; prior is as for run.
func result(ctx context.Context, p *Problem, m *lpModel, code int, opts Options, prior *Solution) (*Solution, error) {
	switch code {
	case lpOptimal:
		return solution(p, m, Optimal)
	case lpInfeasible:
		return nil, ErrInfeasible
	case lpUnbounded:
		return nil, ErrUnbounded
	case lpSubopt, lpUserAbort, lpTimeout:
		return stopped(ctx, p, m, opts, prior)
	}
	return nil, fmt.Errorf("ilp: lp_solve solve returned %d (%s)", code, lpCodeNames[code])
}

// stopped handles a search cut short by a limit, the branching allowance (errGaveUp) or the
// context: it returns the best feasible point, of this search or prior, if any, with the
// reason as error.
func stopped(ctx context.Context, p *Problem, m *lpModel, opts Options, prior *Solution) (*Solution, error) {
	var sol *Solution
	if m.solutionCount() > 0 {
		var err error
		if sol, err = solution(p, m, Feasible); err != nil {
			return nil, err
		}
	}
	if prior != nil && (sol == nil || prior.Objective < sol.Objective) {
		sol = prior
	}
	var why error
	switch err := ctx.Err(); {
	case m.gaveUp():
		return sol, errGaveUp
	case m.exhausted():
		why = fmt.Errorf("%w (iteration limit %d)", ErrTimeout, opts.Iterations)
	case err != nil && !m.timedOut():
		why = fmt.Errorf("ilp: solve stopped: %w", err)
	default:
		why = fmt.Errorf("%w (%v)", ErrTimeout, opts.TimeLimit)
	}
	if sol == nil {
		return nil, why
	}
	return sol, fmt.Errorf("%w; returning a feasible solution of objective %g", why, sol.Objective)
}

// solution reads lp_solve's best point, snaps it and recomputes the
// objective.
func solution(p *Problem, m *lpModel, st Status) (*Solution, error) {
	vals, err := m.variables()
	if err != nil {
		return nil, err
	}
	for i, v := range p.Vars {
		vals[i] = snap(vals[i], v)
	}
	sol := &Solution{Values: vals, Objective: objective(p, vals), Status: st}
	if _, _, nodes := m.effort(); nodes == 0 {
		sol.Basis = m.basis()
	}
	return sol, nil
}

// snap removes lp_solve's round-off: integral kinds become exact integers and
// values just outside a bound land on it.
func snap(x float64, v Var) float64 {
	if v.Kind != Continuous {
		if r := math.Round(x); math.Abs(x-r) <= snapTol {
			x = r
		}
	}
	if x < v.Lo && v.Lo-x <= snapTol {
		x = v.Lo
	}
	if x > v.Hi && x-v.Hi <= snapTol {
		x = v.Hi
	}
	return x
}

// objective computes Σ Objective·vals + ObjConstant; p must be valid.
func objective(p *Problem, vals []float64) float64 {
	sum := p.ObjConstant
	for _, t := range p.Objective {
		sum += t.Coef * vals[t.Var]
	}
	return sum
}

// solveConstant solves a problem without variables: each row is a constant comparison.
func solveConstant(p *Problem) (*Solution, error) {
	ev := Evaluate(p, nil)
	if len(ev.Rows) > 0 {
		return nil, fmt.Errorf("%w: row %s", ErrInfeasible, p.RowName(ev.Rows[0].Row))
	}
	return &Solution{Values: []float64{}, Objective: p.ObjConstant, Status: Optimal}, nil
}
