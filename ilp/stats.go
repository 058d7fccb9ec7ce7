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
	// Err is Solve's error (nil: a proven optimum).
	Err error
	// Cached: the answer came from the memo of earlier solves (memo.go); nothing was
	// built or solved.
	Cached bool
	// Warm: lp_solve started from a given basis (Options.Start), not the all-slack one.
	Warm bool
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
	scaleRows                                                           bool
}

// defaultTuning is every solve's settings: lp_solve's defaults but for the branching
// variable, the one with the largest fractional part (NODE_FRACTIONSELECT, 3) instead of
// the lowest-indexed fractional one. The sharding ILPs' LP relaxations were integral in
// the benchmarks measured (no branching at all); on the random miniature of
// TestSolveAlpaModelMedium, which branches, it cut branch-and-bound from 3,266 nodes and
// 58k iterations to 732 and 19k. Presolve is left off: lp_solve 5.5.2.5's presolve
// (ROWS|COLS|LINDEP) returned points violating the one-hot rows of a GPT-1.3B stage ILP.
var defaultTuning = tuning{presolve: -1, scaling: -1, bbRule: 3, floor: -1, improve: -1, simplex: -1, pivoting: -1}
