package sharding

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/autopar/autopar/ilp"
	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/mesh"
)

// maxRounds bounds the lazy memory rows: each round adds the point where the last plan
// overflowed, and a plan over budget after this many is reported as an error.
const maxRounds = 40

// solve runs lp_solve, adding memory rows lazily: first the few points whose memory could
// exceed the budget most, then, round by round, the point where the plan found overflows.
// Every point's row is implied by the rows of the points that bound it, so the final plan
// fits at every point, not only at the rows added.
func (p *planner) solve(ctx context.Context) (*Result, error) {
	budget := float64(p.opts.MemoryBudget)
	stats := p.baseStats()
	var pts []int
	if budget > 0 {
		lo, hi := p.boundPeak()
		if _, lb := argmax(lo); lb > budget {
			return nil, p.infeasibleMemory(ctx)
		}
		pts = p.topPoints(hi, 4, budget)
	}
	var incumbent []int // the Lagrangian search's best plan that fits: lp_solve's cutoff
	var lagPlan []int   // the same, whether or not it is the cutoff
	if !p.opts.LPSolveOnly {
		res, sweeps, inc := p.certified(budget, stats)
		if res != nil {
			return res, nil
		}
		stats.Sweeps = sweeps
		lagPlan = inc
		if p.opts.Incumbent {
			incumbent = inc
		}
	}
	// A plan known before the solve (Options.Known, known.go) is the cutoff where it beats
	// the Lagrangian's, so that the answer is never worse than it.
	known := p.knownIncumbent(budget)
	incumbent = p.betterIncumbent(incumbent, known)
	baseVars, baseRows := p.prob.NumVars(), p.prob.NumRows()
	w := p.opts.WarmStart.warmFor(baseVars, baseRows, budget)
	if n := p.opts.NoLPAbove; n > 0 && budget > 0 && w == nil && p.prob.NumVars() > n {
		// lp_solve, cold, would not get through the root at the caller's effort (NoLPAbove):
		// the Lagrangian search's best plan that fits is the answer, if it has one.
		if plan := p.betterIncumbent(lagPlan, known); plan != nil {
			stats.Solver = "lagrange"
			if lagPlan == nil || !slices.Equal(plan, lagPlan) {
				stats.Solver = "known"
			}
			if res := p.planResult(plan, ilp.Feasible, stats); res != nil {
				return res, nil
			}
		}
		return nil, fmt.Errorf("%w (lp_solve not run: %d variables)", ilp.ErrTimeout, p.prob.NumVars())
	}
	if w != nil {
		pts = union(w.points, pts)
	}
	var rowPts []int // the points of the memory rows, in row order
	opts := p.opts.ilpOptions()
	start := time.Now()
	for round := 1; ; round++ {
		if len(pts) > 0 && p.hMain == nil {
			p.hMain = p.addHolds(p.prob)
		}
		for i, t := range pts {
			p.prob.AddRow("mem.t"+strconv.Itoa(t), p.memoryTerms(t, p.hMain), ilp.LE, budget)
			rowPts = append(rowPts, t)
			stats.MemoryRows++
			if w != nil && i == len(w.points)-1 {
				opts.Start = w.start(p.prob.NumVars(), p.prob.NumRows())
			}
		}
		if w != nil && len(w.points) == 0 {
			opts.Start = w.basis
		}
		w = nil
		opts.Incumbent = p.incumbentValues(incumbent)
		sol, err := ilp.Solve(ctx, p.prob, opts)
		stats.Rounds = round
		if sol != nil && sol.Basis != nil {
			opts.Start = sol.Basis // the next round's problem is this one and a row
		}
		if errors.Is(err, ilp.ErrInfeasible) {
			return nil, p.infeasibleMemory(ctx)
		}
		if sol == nil {
			return nil, err
		}
		// A timeout with a feasible plan is kept (Status says "feasible", not "optimal").
		choice := p.choiceFrom(sol.Values)
		t, peak := p.peakOf(choice)
		if budget > 0 && peak > budget {
			if round >= maxRounds {
				return nil, errors.New("sharding: the memory rows did not converge; raise the budget")
			}
			pts = []int{t}
			continue
		}
		stats.SolveTime = time.Since(start)
		stats.Rows = p.prob.NumRows()
		stats.Variables = p.prob.NumVars()
		stats.Status = sol.Status.String()
		stats.Objective = sol.Objective
		stats.Solver = "lp_solve"
		res := p.result(choice, stats)
		res.PeakMemory = int64(peak)
		res.Gathered = int64(p.gatheredBytes(choice))
		if sol.Basis != nil {
			res.warm = &warmStart{basis: sol.Basis, vars: baseVars, rows: baseRows, points: rowPts}
		}
		return res, nil
	}
}

// incumbentValues is choice's point of the ILP as it stands (memory rows included), to
// give lp_solve as its incumbent (ilp.Options.Incumbent: its cutoff, and the answer when
// nothing beats it); nil when choice is nil or its point does not satisfy every row (it
// cannot: the plans the Lagrangian search keeps fit the budget at every point).
func (p *planner) incumbentValues(choice []int) []float64 {
	if choice == nil {
		return nil
	}
	x := p.assignment(choice)
	if ev := ilp.Evaluate(p.prob, x); !ev.Feasible() {
		return nil
	}
	return x
}

// result spells a choice of group strategies out per value.
func (p *planner) result(choice []int, stats ILPStats) *Result {
	n := len(p.g.Values)
	r := &Result{Mesh: p.lm, Budget: p.opts.MemoryBudget, ILP: stats,
		Specs: make([]mesh.Spec, n), Choice: make([]int, n), Strategies: make([]Strategy, n)}
	// Resharding is once per (value, layout): codegen keeps every layout it makes of a
	// value for all the consumers that read it (the first consumer is named).
	seen, spilled := map[reshardOnce]bool{}, map[reshardOnce]bool{}
	for id := range n {
		v := ir.ValueID(id)
		k := int(p.pick(v, choice[p.groupOf[v]]))
		s := p.cands[v][k]
		r.Choice[id], r.Strategies[id], r.Specs[id] = k, s, s.Out
		r.Cost.Compute += s.Compute
		r.Cost.Communication += s.Comm
		for _, c := range s.Collectives {
			r.Collectives = append(r.Collectives, Collective{Value: v, Consumer: ir.NoValue, Slot: -1,
				Kind: c.Kind, Axes: c.Axes, Dim: c.Dim, ToDim: -1, Reduce: c.Reduce, Bytes: c.Bytes, Time: c.Time, After: s.Out})
		}
		for i, a := range p.g.Values[id].Args {
			r.addReshard(p, seen, spilled, a, v, i, r.Specs[a], s.In[i])
		}
	}
	for _, u := range p.g.Updates {
		r.addReshard(p, seen, spilled, u.Value, u.Target, -1, r.Specs[u.Value], r.Specs[u.Target])
	}
	r.Cost.Total = r.Cost.Compute + r.Cost.Communication + r.Cost.Resharding
	return r
}

// reshardOnce names one resharding: a value into a layout.
type reshardOnce struct {
	v    ir.ValueID
	spec string
}

// addReshard counts the resharding of from into want for consumer to (slot −1: the
// update of to), once per (value, layout), and its spill (fusedSpill) once where a
// consumer in from's kernel reads that layout, whichever consumer comes first: the
// kernel is split for it either way, as the ILP prices it (priceInside).
func (r *Result) addReshard(p *planner, seen, spilled map[reshardOnce]bool, from, to ir.ValueID, slot int, have, want mesh.Spec) {
	k := reshardOnce{from, want.String()}
	rs := p.reshard(from, have, want)
	if rs.Time > 0 && slot >= 0 && p.fu.internal(from, to) && !spilled[k] {
		spilled[k] = true
		r.Cost.Resharding += p.fusedSpill(from, r.Strategies[from].Memory, []mesh.Spec{want}, []int{0})
	}
	if seen[k] {
		return
	}
	seen[k] = true
	r.Cost.Resharding += rs.Time
	for _, st := range rs.Steps {
		if st.Time == 0 && st.Sent == 0 {
			continue // a free slice moves nothing
		}
		r.Collectives = append(r.Collectives, Collective{Value: from, Consumer: to, Slot: slot,
			Kind: st.Kind, Axes: st.Axes, Dim: st.Dim, ToDim: st.ToDim, Bytes: st.Bytes, Time: st.Time, After: st.After})
	}
}
