package sharding

import (
	"context"
	"math"

	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/mesh"
)

// MemoryDual is what MemoryBound proves of a sharding ILP: FreeBound's dual bound without
// memory rows and, where the memory binds, a bound under them.
type MemoryDual struct {
	FreeDual
	// Under is at most the ILP objective of every plan Solve may return for the graph on
	// the mesh under the options' candidates whose peak under the options' Recompute marks
	// (Result.PeakWith; PeakMemory when the marks are nil) is at most their MemoryBudget:
	// the Lagrangian bound of the memory rows (lagrange.go), as LowerBound takes it, after
	// a bounded number of sweeps; Bound where the free plan fits or the search did not run.
	// A plan over the budget (a least-footprint fallback) is not bounded by it.
	Under float64
	// Fits: a plan of the ILP fits the budget (the free plan, or one the Lagrangian search
	// decoded), so Solve under that budget answers with a plan that fits it, never with a
	// memory error.
	Fits bool
}

// MemoryBound is FreeBound with the Lagrangian search of the memory rows run, where the
// free plan does not fit opts.MemoryBudget, for at most lagSweeps message-passing sweeps
// in all (the dual bound of any messages is a bound, so a search cut short is still one,
// only weaker; the count of sweeps, not time, keeps the result independent of the load).
// A range of a whole network whose layers' optima do not fit together is priced above
// their sum by Under (the root's time floors, issue 13 round ten, branch timefloor).
func MemoryBound(ctx context.Context, g *ir.Graph, lm *mesh.LogicalMesh, opts Options, lagSweeps int) (MemoryDual, error) {
	opts.sharedCells = math.MaxInt32 // every value's layouts priced once each, as Result.Cost prices them
	p, err := newPlannerContext(ctx, g, lm, opts)
	if err != nil {
		return MemoryDual{}, err
	}
	st, err := p.solveEnergy()
	if err != nil {
		return MemoryDual{}, err
	}
	if err := ctx.Err(); err != nil {
		return MemoryDual{}, err
	}
	d := MemoryDual{FreeDual: FreeDual{Bound: st.res.lb, Closed: st.res.closed, Plan: st.res.ub,
		PerEdgeValues: p.perEdge, Sweeps: st.res.iters}, Under: st.res.lb}
	budget := float64(p.opts.MemoryBudget)
	if st.res.x != nil && budget > 0 {
		if _, peak := p.peakOf(st.choice(st.res.x)); peak > budget {
			left := lagSweeps
			stop := func() bool {
				left--
				return left < 0 || ctx.Err() != nil
			}
			lag := p.lagrange(st, budget, stop)
			if err := ctx.Err(); err != nil {
				return MemoryDual{}, err
			}
			d.Under = max(d.Under, lag.lb)
			d.Sweeps += lag.sweeps
			d.Fits = lag.x != nil
			return d, nil
		}
		d.Fits = true
	}
	return d, nil
}
