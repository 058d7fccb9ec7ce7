package ilp

import (
	"sync/atomic"
	"time"
)

// Stats is what one Solve cost: the model's size, the time spent loading it into lp_solve
// and solving it, and lp_solve's own effort counters.
type Stats struct {
	Vars, Rows int
	// Limit is the solve's time limit (0: none).
	Limit time.Duration
	// Build is the time spent loading the Problem into lp_solve; Wall and CPU the solve's
	// wall-clock time and the CPU time of the thread that ran it.
	Build, Wall, CPU time.Duration
	// Iterations are simplex iterations (get_total_iter), Nodes branch-and-bound nodes
	// (get_total_nodes), over the whole solve.
	Iterations, Nodes int64
	// Rules is how many branching rules searched (see solve): 0 for a problem without
	// integer variables, 2 when the first gave up.
	Rules int
	// Err is Solve's error (nil: a proven optimum).
	Err error
	// Cached: the answer came from the memo of earlier solves (memo.go); nothing was
	// built or solved.
	Cached bool
	// Warm: lp_solve started from a given basis (Options.Start), not the all-slack one.
	Warm bool
	// Incumbent is the point of Options.Incumbent when the search ran with its cutoff;
	// nil without one, and when lp_solve failed numerically with it and solved again
	// without. Read only.
	Incumbent []float64
}

// tracer receives every Solve's Stats; see Trace.
var tracer atomic.Pointer[func(*Problem, Stats)]

// Trace makes every later Solve call f with its problem and what it cost, from the solving
// goroutine (f must be safe for concurrent calls and must not modify the problem), until
// the returned function restores the previous tracer. It is for benchmarks and diagnostics;
// without one Solve records nothing.
func Trace(f func(*Problem, Stats)) (restore func()) {
	old := tracer.Swap(&f)
	return func() { tracer.Store(old) }
}

func traced(p *Problem, st Stats) {
	if f := tracer.Load(); f != nil && *f != nil {
		(*f)(p, st)
	}
}

// tuning holds lp_solve settings; a negative value (0 for depth) keeps lp_solve's default.
type tuning struct {
	presolve, scaling, bbRule, floor, improve, depth, simplex, pivoting int
	crash                                                               int
	// firstRule, when ≥ 0, is the branching rule tried first on a problem with integer
	// variables, within a branching allowance, before bbRule (see solve).
	firstRule int
	verbose   int // lp_solve's set_verbose, for the replay harness; 0: quiet
	// epsPivot, epsEl, gapAbs and gapRel replace lp_solve's epsilons and MIP gaps when
	// positive (set_epspivot, set_epsel, set_mip_gap).
	epsPivot, epsEl, gapAbs, gapRel float64
	scaleRows                       bool
	// noCutoff drops the incumbent's cutoff (Options.Incumbent), after lp_solve failed
	// numerically with it (see run).
	noCutoff bool
}

// lp_solve's branching rules used (set_bb_rule, lp_lib.h).
const (
	// nodeFractionSelect: the variable with the largest fractional part (NODE_FRACTIONSELECT).
	nodeFractionSelect = 3
	// nodePseudoGreedy: the variable by pseudo-costs of the non-integer count
	// (NODE_PSEUDONONINTSELECT), the branch taken first by the objective's slope
	// (NODE_GREEDYMODE).
	nodePseudoGreedy = 5 | 32
)

// defaultTuning is every solve's settings: lp_solve's defaults but for branch and bound,
// which tries nodePseudoGreedy within a branching allowance, then nodeFractionSelect (see
// solve and docs/DECISIONS.md, "lp_solve settings over a recorded corpus"). lp_solve's own
// default rule (NODE_PSEUDONONINTSELECT with greedy, dynamic and reduced-cost-fixing
// modes) is not used: on the random miniature of TestSolveAlpaModelMedium it took 3,266
// nodes and 58k iterations to nodeFractionSelect's 732 and 19k. Presolve is left off:
// lp_solve 5.5.2.5's presolve (ROWS|COLS|LINDEP) returned points violating the one-hot
// rows of a GPT-1.3B stage ILP.
var defaultTuning = tuning{presolve: -1, scaling: -1, bbRule: nodeFractionSelect, firstRule: nodePseudoGreedy,
	floor: -1, improve: -1, simplex: -1, pivoting: -1, crash: -1}
