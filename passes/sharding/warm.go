package sharding

import (
	"slices"

	"github.com/autopar/autopar/ilp"
)

// Warm starts (Options.WarmStart). The memory-lean solves of the search re-solve a stage's
// ILP under a smaller budget: the same variables and rows but for the right-hand side of
// the memory rows and the rows added for points that overflow. A re-solve rebuilds the ILP
// in the same order — node and edge variables and their rows, then the holding variables
// and their rows, then a memory row per point of the earlier solve, in its order, under the
// new budget — so that the earlier solve's final basis (ilp.Solution.Basis) describes a
// prefix of it, and lp_solve starts there; the rows of further points extend it (ilp's
// Options.Start). Within one solve, each round of lazy memory rows starts from the last.
// A start changes lp_solve's path, not the optimum's cost.

// warmStart is what a Result keeps for a later solve of its ILP to start from.
type warmStart struct {
	basis      *ilp.Basis // the final basis of the ILP below
	vars, rows int        // the ILP's size before holding variables and memory rows
	points     []int      // the points of its memory rows, in row order
}

// warmFor returns r's start for an ILP whose size before memory rows is vars × rows,
// solved under budget; nil when r has none or is not a solve of the same ILP.
func (r *Result) warmFor(vars, rows int, budget float64) *warmStart {
	if r == nil || r.warm == nil {
		return nil
	}
	w := r.warm
	if w.vars != vars || w.rows != rows || budget <= 0 && len(w.points) > 0 {
		return nil // another ILP, or a budget without memory rows
	}
	return w
}

// start returns the basis for the ILP rebuilt up to the earlier solve's last memory row,
// nil when its size is not the earlier ILP's (then lp_solve starts cold).
func (w *warmStart) start(vars, rows int) *ilp.Basis {
	if len(w.basis.Vars) != vars || len(w.basis.Rows) != rows {
		return nil
	}
	return w.basis
}

// union returns a followed by the points of b not in a.
func union(a, b []int) []int {
	out := slices.Clone(a)
	for _, t := range b {
		if !slices.Contains(a, t) {
			out = append(out, t)
		}
	}
	return out
}
