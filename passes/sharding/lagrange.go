package sharding

import (
	"math"
	"slices"

	"github.com/autopar/autopar/ir"
)

// Lagrangian relaxation of the memory rows (docs/DECISIONS.md, "Lagrangian bounds for
// memory-bound ILPs"). When the certificate's plan (certify.go) does not fit the budget B,
// the memory rows bind. The memory at a point t of a plan x is mem_t(x) = Σ over values
// alive at t of their bytes under x, plus each gathered copy's bytes when x holds it — an
// or-factor over the value and its readers, like a shared value's y. A plan fits when
// mem_t(x) ≤ B at every t, so for any μ ≥ 0 and any set T of points,
//
//	L(μ) = min_x E(x) + μ·Σ_{t∈T} (mem_t(x) − B) ≤ min { E(x) : x fits },
//
// and the message-passing bound of that energy is at most L(μ): a lower bound on the ILP
// with its memory rows (as is the free bound). The labelings decoded on the way are plans;
// those whose peak (peakOf) fits are feasible, and the best of them is an upper bound.
// When the two meet within lp_solve's gaps the plan is optimal; else it is an incumbent
// that lp_solve's answer must beat.

// Limits of the multiplier search: doublings of μ until a decoded plan fits, then
// bisection steps between the last μ whose plans overflowed and the first that fit; the
// sweeps of each warm-started solve, and the points penalized.
const (
	lagDoublings = 24
	lagBisect    = 8
	lagIters     = 60
	lagStall     = 8
	lagMaxPoints = 4
)

// lagResult is what the multiplier search found.
type lagResult struct {
	lb     float64 // a lower bound on the ILP's optimum under the budget (−Inf: none)
	x      []int   // the best labeling found that fits the budget (nil: none)
	ub     float64 // its energy, the ILP's objective at it (+Inf: none)
	closed bool    // ub − lb within lp_solve's gaps: x is optimal under the budget
	mu     float64 // the greatest μ solved whose plans overflowed (0: none)
	solves int     // message-passing solves run
	sweeps int
}

// lagProblem is the multiplier search's input, free of the planner.
type lagProblem struct {
	base *mpModel  // the energy E
	warm *mpSolver // a solver of base whose messages start the search (nil: cold)
	free mpResult  // base's free solve
	// The memory: at point t, Σ_v memOf(t)[v][x_v], plus at every point Σ_v gU[v][x_v] and
	// copyBytes[i] for each or-factor copies[i] (its c unset) that x triggers.
	memOf     func(t int) [][]float64
	gU        [][]float64
	copies    []mpFactor
	copyBytes []float64
	peak      func(x []int) (t int, peak float64) // the true peak and its point
	budget    float64
	// enough, when set, ends the search once the bound and the plan found so far do
	// (MemoryBound's target: any bound is one, a search cut short only a weaker one)
	enough func(lb float64, fits bool) bool
	// from, where above the first μ, is where the doublings start: the μ a search stopped
	// at by enough reached (lagResult.mu), so that one asked for more resumes about there
	from float64
}

// lagrange is the multiplier search on p's ILP after st, its free solve, under budget.
func (p *planner) lagrange(st *mpState, budget float64, stop func() bool) lagResult {
	if budget <= 0 || st.res.x == nil {
		return lagResult{lb: st.res.lb, ub: math.Inf(1)}
	}
	return lagSearch(p.lagProblem(st, budget), stop)
}

// lagProblem writes p's memory over st's energy model.
func (p *planner) lagProblem(st *mpState, budget float64) lagProblem {
	mv := st.mv
	choice := make([]int, len(p.groups))
	toChoice := func(x []int) []int {
		for gi := range choice {
			choice[gi] = x[mv[gi]]
		}
		return choice
	}
	lp := lagProblem{base: st.m, warm: st.s, free: st.res, budget: budget,
		peak: func(x []int) (int, float64) { return p.peakOf(toChoice(x)) }}
	// One or-factor per gathered layout: its copy is held exactly when no member kills (v
	// stored in it) and some member triggers (a reader reads it), as holds says; one with a
	// single member is a unary term.
	labels := st.m.labels
	lp.gU = make([][]float64, len(labels))
	for v, n := range labels {
		lp.gU[v] = make([]float64, n)
	}
	for i := range p.gatheredLayouts() {
		gl := &p.gath[i]
		cats := map[int][]uint8{}
		var vars []int
		member := func(v int) []uint8 {
			if _, ok := cats[v]; !ok {
				vars = append(vars, v)
				cats[v] = make([]uint8, labels[v])
			}
			return cats[v]
		}
		for _, r := range gl.readers {
			cat := member(mv[p.groupOf[r.u]])
			for k := range cat {
				if in := p.cands[r.u][p.pick(r.u, k)].In; r.slot < len(in) && specBits(in[r.slot]) == gl.key {
					cat[k] = catTrigger
				}
			}
		}
		cat := member(mv[p.groupOf[gl.v]])
		for k := range cat {
			if specBits(p.cands[gl.v][p.pick(gl.v, k)].Out) == gl.key {
				cat[k] = catKill
			}
		}
		if len(vars) == 1 {
			for k, q := range cats[vars[0]] {
				if q == catTrigger {
					lp.gU[vars[0]][k] += gl.bytes
				}
			}
			continue
		}
		slices.Sort(vars)
		f := mpFactor{vars: vars, or: true}
		for _, v := range vars {
			f.cat = append(f.cat, cats[v])
		}
		lp.copies, lp.copyBytes = append(lp.copies, f), append(lp.copyBytes, gl.bytes)
	}
	lp.memOf = func(t int) [][]float64 {
		mt := make([][]float64, len(labels))
		for v, n := range labels {
			mt[v] = make([]float64, n)
		}
		for id := range p.g.Values {
			if !p.live.alive(id, t) {
				continue
			}
			v := mv[p.groupOf[id]]
			for k := range mt[v] {
				mt[v][k] += float64(p.cands[id][p.pick(ir.ValueID(id), k)].Memory)
			}
		}
		return mt
	}
	return lp
}

// lagSearch searches one multiplier μ shared by the points T (first the free plan's peak
// point; then each point where a plan of the search peaks over the budget, up to
// lagMaxPoints): doubling μ until a decoded plan fits, then bisecting. stop, when it
// reports true, ends the search (the result stays valid).
func lagSearch(lp lagProblem, stop func() bool) lagResult {
	free, base, budget := lp.free, lp.base, lp.budget
	// The constrained optimum is at least the free one: the free bound holds under the budget.
	res := lagResult{lb: free.lb, ub: math.Inf(1)}
	if budget <= 0 || free.x == nil {
		return res
	}
	t0, peak0 := lp.peak(free.x)
	if peak0 <= budget {
		return res // the free plan fits: nothing binds
	}
	m := &mpModel{labels: base.labels, unary: make([][]float64, len(base.unary)), constant: base.constant,
		factors: append(slices.Clone(base.factors), lp.copies...)}
	for v, u := range base.unary {
		m.unary[v] = slices.Clone(u)
	}
	nBase := len(base.factors)
	s := newMPSolver(m)
	if lp.warm != nil {
		for f := range nBase {
			for i := range s.msg[f] {
				copy(s.msg[f][i], lp.warm.msg[f][i])
			}
		}
	}
	memAt := map[int][][]float64{}
	pts := []int{t0}
	setMu := func(mu float64) {
		nT := float64(len(pts))
		for v, u := range base.unary {
			for k := range u {
				m.unary[v][k] = u[k] + mu*nT*lp.gU[v][k]
			}
		}
		for i, b := range lp.copyBytes {
			m.factors[nBase+i].c = mu * nT * b
		}
		m.constant = base.constant - mu*nT*budget
		for _, t := range pts {
			mt, ok := memAt[t]
			if !ok {
				mt = lp.memOf(t)
				memAt[t] = mt
			}
			for v, row := range mt {
				for k, b := range row {
					m.unary[v][k] += mu * b
				}
			}
		}
	}
	var fitted bool // the current solve decoded a plan that fits
	var over []int  // points where its plans overflowed
	visit := func(x []int) {
		t, peak := lp.peak(x)
		if peak > budget {
			if !slices.Contains(pts, t) && !slices.Contains(over, t) {
				over = append(over, t)
			}
			return
		}
		fitted = true
		if e := base.energy(x); e < res.ub {
			res.ub, res.x = e, slices.Clone(x)
		}
	}
	solveAt := func(mu float64) bool {
		setMu(mu)
		fitted, over = false, over[:0]
		r := s.run(lagIters, lagStall, stop, visit)
		res.solves++
		res.sweeps += r.iters
		if r.iters > 0 {
			res.lb = max(res.lb, r.lb)
		}
		if len(pts) < lagMaxPoints && len(over) > 0 {
			pts = append(pts, over[0])
		}
		res.closed = res.x != nil && mpClosed(res.ub, res.lb)
		return fitted
	}
	// The first μ prices the overflow at a hundredth of the free optimum's size.
	scale := max(math.Abs(free.ub), math.Abs(free.lb), 1e-300)
	mu := max(0.01*scale/max(peak0-budget, 1e-6*budget), lp.from)
	lo, hi := 0.0, math.Inf(1)
	for range lagDoublings {
		if solveAt(mu) {
			hi = mu
			break
		}
		res.mu = mu
		if res.closed || lp.enough != nil && lp.enough(res.lb, res.x != nil) || stop != nil && stop() {
			return res
		}
		lo, mu = mu, 2*mu
	}
	if math.IsInf(hi, 1) {
		return res
	}
	for range lagBisect {
		if res.closed || lp.enough != nil && lp.enough(res.lb, res.x != nil) || stop != nil && stop() {
			break
		}
		mu = (lo + hi) / 2
		if solveAt(mu) {
			hi = mu
		} else {
			lo, res.mu = mu, mu
		}
	}
	return res
}
