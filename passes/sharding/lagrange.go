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
	choice []int   // the best plan found that fits the budget (nil: none)
	ub     float64 // its energy, the ILP's objective at it (+Inf: none)
	closed bool    // ub − lb within lp_solve's gaps: choice is optimal under the budget
	solves int     // message-passing solves run
	sweeps int
}

// lagrange searches one multiplier μ shared by the points T (first the free plan's peak
// point; then each point where a plan of the search peaks over the budget, up to
// lagMaxPoints), after st, the free solve of p's energy, whose messages start it warm.
// stop, when it reports true, ends the search (the result stays valid).
func (p *planner) lagrange(st *mpState, budget float64, stop func() bool) lagResult {
	free := st.res
	// The constrained optimum is at least the free one: the free bound holds under the budget.
	res := lagResult{lb: free.lb, ub: math.Inf(1)}
	if budget <= 0 || free.x == nil {
		return res
	}
	mv := st.mv
	choice := make([]int, len(p.groups))
	toChoice := func(x []int) []int {
		for gi := range choice {
			choice[gi] = x[mv[gi]]
		}
		return choice
	}
	t0, peak0 := p.peakOf(toChoice(free.x))
	if peak0 <= budget {
		return res // the free plan fits: nothing binds
	}
	// The Lagrangian model: the energy's factors, then one or-factor per gathered layout
	// (its copy is held exactly when no member kills and some triggers: holds), priced
	// μ·|T|·bytes; a copy whose factor would have one member is a unary term, gU.
	base := st.m
	m := &mpModel{labels: base.labels, unary: make([][]float64, len(base.unary)), constant: base.constant,
		factors: slices.Clone(base.factors)}
	gU := make([][]float64, len(base.unary))
	for v, u := range base.unary {
		m.unary[v], gU[v] = slices.Clone(u), make([]float64, len(u))
	}
	var gBytes []float64 // per gathered factor, in order after base's
	for i := range p.gatheredLayouts() {
		gl := &p.gath[i]
		cats := map[int][]uint8{}
		var vars []int
		member := func(v int) []uint8 {
			if _, ok := cats[v]; !ok {
				vars = append(vars, v)
				cats[v] = make([]uint8, m.labels[v])
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
					gU[vars[0]][k] += gl.bytes
				}
			}
			continue
		}
		slices.Sort(vars)
		f := mpFactor{vars: vars, or: true}
		for _, v := range vars {
			f.cat = append(f.cat, cats[v])
		}
		m.factors = append(m.factors, f)
		gBytes = append(gBytes, gl.bytes)
	}
	nBase := len(base.factors)
	s := newMPSolver(m)
	for f := range nBase { // warm: the free solve's messages
		for i := range s.msg[f] {
			copy(s.msg[f][i], st.s.msg[f][i])
		}
	}
	// memAt[t][v][k]: bytes of model variable v's values alive at t under label k.
	memAt := map[int][][]float64{}
	memOf := func(t int) [][]float64 {
		if mt, ok := memAt[t]; ok {
			return mt
		}
		mt := make([][]float64, len(m.labels))
		for v, n := range m.labels {
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
		memAt[t] = mt
		return mt
	}
	pts := []int{t0}
	setMu := func(mu float64) {
		nT := float64(len(pts))
		for v, u := range base.unary {
			for k := range u {
				m.unary[v][k] = u[k] + mu*nT*gU[v][k]
			}
		}
		for i, b := range gBytes {
			m.factors[nBase+i].c = mu * nT * b
		}
		m.constant = base.constant - mu*nT*budget
		for _, t := range pts {
			mt := memOf(t)
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
		t, peak := p.peakOf(toChoice(x))
		if peak > budget {
			if !slices.Contains(pts, t) && !slices.Contains(over, t) {
				over = append(over, t)
			}
			return
		}
		fitted = true
		if e := base.energy(x); e < res.ub {
			res.ub, res.choice = e, slices.Clone(choice)
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
		res.closed = res.choice != nil && mpClosed(res.ub, res.lb)
		return fitted
	}
	// The first μ prices the overflow at a hundredth of the free optimum's size.
	scale := max(math.Abs(free.ub), math.Abs(free.lb), 1e-300)
	mu := 0.01 * scale / max(peak0-budget, 1e-6*budget)
	lo, hi := 0.0, math.Inf(1)
	for range lagDoublings {
		if solveAt(mu) {
			hi = mu
			break
		}
		if res.closed || stop != nil && stop() {
			return res
		}
		lo, mu = mu, 2*mu
	}
	if math.IsInf(hi, 1) {
		return res
	}
	for range lagBisect {
		if res.closed || stop != nil && stop() {
			break
		}
		mu = (lo + hi) / 2
		if solveAt(mu) {
			hi = mu
		} else {
			lo = mu
		}
	}
	return res
}
