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
	// Mu is the greatest multiplier of the memory rows the search solved whose plans
	// overflowed the budget (0: none): MemoryBoundUntil's from, to resume it
	Mu float64
}

// MemoryBound is FreeBound with the Lagrangian search of the memory rows run, where the
// free plan does not fit opts.MemoryBudget, for at most lagSweeps message-passing sweeps
// in all (the dual bound of any messages is a bound, so a search cut short is still one,
// only weaker; the count of sweeps, not time, keeps the result independent of the load).
// A range of a whole network whose layers' optima do not fit together is priced above
// their sum by Under (the root's time floors, issue 13 round ten, branch timefloor).
func MemoryBound(ctx context.Context, g *ir.Graph, lm *mesh.LogicalMesh, opts Options, lagSweeps int) (MemoryDual, error) {
	return MemoryBoundUntil(ctx, g, lm, opts, lagSweeps, 0, nil)
}

// MemoryBoundUntil is MemoryBound whose Lagrangian search also ends, between its solves,
// once enough holds of what it proves so far (Under and Fits as they stand): where the
// caller knows the bound it needs (a range priced at the best plan found loses to it: issue 13, round ten, branch
// gpt67c), the sweeps past it only raise a bound that refutes already. Under is a bound
// wherever the search stops, only a weaker one the earlier it does. from, when above the
// search's first multiplier, is where its doublings start (a search stopped by enough
// resumed about where it stopped: its MemoryDual.Mu); any multiplier gives a bound.
//
// A search stopped by enough is kept in opts.Candidates (lagkeep.go), and a later call
// for the same graph, mesh and options (its slices, maps and pointers the same objects,
// unchanged) with from its Mu goes on with it, planner, messages and multiplier as they
// were, instead of building and solving anew; lagSweeps then counts this call's sweeps.
func MemoryBoundUntil(ctx context.Context, g *ir.Graph, lm *mesh.LogicalMesh, opts Options, lagSweeps int, from float64, enough func(MemoryDual) bool) (MemoryDual, error) {
	opts.sharedCells = math.MaxInt32 // every value's layouts priced once each, as Result.Cost prices them
	var keep *lagKeep
	if opts.Candidates != nil {
		keep = &opts.Candidates.lags
	}
	if e := keep.take(g, lm, opts, from); e != nil {
		d := MemoryDual{FreeDual: e.free, Under: e.free.Bound}
		return e.goOn(ctx, d, lagSweeps, enough, keep)
	}
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
			lp := p.lagProblem(st, budget) // p.lagrange's, with enough and from
			lp.from = from
			p.prob, p.memo = nil, nil // the energy is built: a kept search needs neither the ILP nor its pricing memo
			e := &lagKept{g: g, lm: lm, opts: opts, p: p, free: d.FreeDual, q: newLagSearcher(lp)}
			return e.goOn(ctx, d, lagSweeps, enough, keep)
		}
		d.Fits = true
	}
	return d, nil
}

// goOn runs e's search for at most lagSweeps sweeps from where it stands, until enough
// holds of d with what it proves, and keeps it in keep where it stopped so.
func (e *lagKept) goOn(ctx context.Context, d MemoryDual, lagSweeps int, enough func(MemoryDual) bool, keep *lagKeep) (MemoryDual, error) {
	left := lagSweeps
	stop := func() bool {
		left--
		return left < 0 || ctx.Err() != nil
	}
	e.q.lp.enough = nil
	if enough != nil {
		e.q.lp.enough = func(lb float64, fits bool) bool {
			now := d
			now.Under, now.Fits = max(d.Under, lb), fits
			return enough(now)
		}
	}
	sweeps := e.q.res.sweeps
	lag := e.q.run(stop)
	if err := ctx.Err(); err != nil {
		return MemoryDual{}, err
	}
	d.Under = max(d.Under, lag.lb)
	d.Sweeps += lag.sweeps - sweeps
	d.Fits = lag.x != nil
	d.Mu = lag.mu
	if e.q.byEnough {
		e.q.lp.enough = nil // the caller's, not to be called once it returned
		keep.put(e)
	}
	return d, nil
}
