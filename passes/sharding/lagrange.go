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
	return newLagSearcher(lp).run(stop)
}

// lagSearcher is lagSearch as a search that can stop and go on: run returns where lp.enough
// holds, asked between solves and after each sweep (byEnough; a solve stopped inside is
// cur), and a later run, with lp.enough changed to ask for more, continues from there, its
// solver's messages, points and multiplier as they were, so that a search asked in steps
// makes the same sweeps as one asked once (lagkeep.go keeps such searches).
type lagSearcher struct {
	lp       lagProblem
	m        *mpModel  // base's energy with the memory priced at mu
	s        *mpSolver // m's solver: its messages carry from one solve to the next
	nBase    int       // base's factors; the copies' or-factors follow
	memAt    map[int][][]float64
	pts      []int // the points T
	over     []int // points where the current solve's plans overflowed
	fitted   bool  // the current solve decoded a plan that fits
	res      lagResult
	started  bool
	phase    lagPhase
	step     int  // the doublings (lagDoubling) or bisections (lagBisecting) made
	overflow bool // lagDoubling: the last solve's plans overflowed; the next μ doubles
	mu       float64
	lo, hi   float64
	byEnough bool   // the last run returned where lp.enough held: it can go on
	cur      *mpRun // the solve paused where lp.enough held after a sweep (nil: none)
}

type lagPhase uint8

const (
	lagDoubling lagPhase = iota
	lagBisecting
	lagDone
)

func newLagSearcher(lp lagProblem) *lagSearcher {
	return &lagSearcher{lp: lp, res: lagResult{lb: lp.free.lb, ub: math.Inf(1)}}
}

// start prices the memory into a copy of the energy, the free plan's peak point first; it
// reports false where nothing binds (no budget, no free plan, or the free plan fits).
func (q *lagSearcher) start() bool {
	lp := q.lp
	free, base, budget := lp.free, lp.base, lp.budget
	if budget <= 0 || free.x == nil {
		return false
	}
	t0, peak0 := lp.peak(free.x)
	if peak0 <= budget {
		return false // the free plan fits: nothing binds
	}
	q.m = &mpModel{labels: base.labels, unary: make([][]float64, len(base.unary)), constant: base.constant,
		factors: append(slices.Clone(base.factors), lp.copies...)}
	for v, u := range base.unary {
		q.m.unary[v] = slices.Clone(u)
	}
	q.nBase = len(base.factors)
	q.s = newMPSolver(q.m)
	if lp.warm != nil {
		for f := range q.nBase {
			for i := range q.s.msg[f] {
				copy(q.s.msg[f][i], lp.warm.msg[f][i])
			}
		}
		q.lp.warm = nil // its messages are copied: a kept search need not hold them
	}
	q.memAt = map[int][][]float64{}
	q.pts = []int{t0}
	// The first μ prices the overflow at a hundredth of the free optimum's size.
	scale := max(math.Abs(free.ub), math.Abs(free.lb), 1e-300)
	q.mu = max(0.01*scale/max(peak0-budget, 1e-6*budget), lp.from)
	q.lo, q.hi = 0, math.Inf(1)
	return true
}

// setMu prices the memory of the points T at μ.
func (q *lagSearcher) setMu(mu float64) {
	lp, m, base := &q.lp, q.m, q.lp.base
	nT := float64(len(q.pts))
	for v, u := range base.unary {
		for k := range u {
			m.unary[v][k] = u[k] + mu*nT*lp.gU[v][k]
		}
	}
	for i, b := range lp.copyBytes {
		m.factors[q.nBase+i].c = mu * nT * b
	}
	m.constant = base.constant - mu*nT*lp.budget
	for _, t := range q.pts {
		mt, ok := q.memAt[t]
		if !ok {
			mt = lp.memOf(t)
			q.memAt[t] = mt
		}
		for v, row := range mt {
			for k, b := range row {
				m.unary[v][k] += mu * b
			}
		}
	}
}

// visit sees a decoded plan: one that fits may be the best, one that overflows names a point.
func (q *lagSearcher) visit(x []int) {
	t, peak := q.lp.peak(x)
	if peak > q.lp.budget {
		if !slices.Contains(q.pts, t) && !slices.Contains(q.over, t) {
			q.over = append(q.over, t)
		}
		return
	}
	q.fitted = true
	if e := q.lp.base.energy(x); e < q.res.ub {
		q.res.ub, q.res.x = e, slices.Clone(x)
	}
}

// solveAt solves the energy priced at μ and reports whether a decoded plan fitted. Where
// lp.enough holds of the bound after a sweep, the solve pauses (paused: the search returns
// to its caller, byEnough) and the next solveAt goes on with it, whatever its μ.
func (q *lagSearcher) solveAt(mu float64, stop func() bool) (fitted, paused bool) {
	if q.cur == nil {
		q.setMu(mu)
		q.fitted, q.over = false, q.over[:0]
		q.cur = &mpRun{maxIters: lagIters, stall: lagStall, res: mpResult{ub: math.Inf(1), lb: math.Inf(-1)}}
	}
	r := q.cur
	var pause func(lb float64) bool
	if q.lp.enough != nil {
		pause = func(lb float64) bool { return q.lp.enough(max(q.res.lb, lb), q.res.x != nil) }
	}
	if pause != nil && r.res.iters > 0 && pause(q.res.lb) {
		return false, true // a paused solve whose caller asks no more than it has
	}
	before := r.res.iters
	paused = q.s.sweeps(r, stop, q.visit, pause)
	q.res.sweeps += r.res.iters - before
	if r.res.iters > 0 {
		q.res.lb = max(q.res.lb, r.res.lb)
	}
	if paused {
		return false, true // the solve goes on at the next call
	}
	q.cur = nil
	q.res.solves++
	if len(q.pts) < lagMaxPoints && len(q.over) > 0 {
		q.pts = append(q.pts, q.over[0])
	}
	q.res.closed = q.res.x != nil && mpClosed(q.res.ub, q.res.lb)
	return q.fitted, false
}

// run searches on from where the last run returned (from the start, the first time) until
// the search ends, closes, lp.enough holds or stop reports true; the result stays valid.
func (q *lagSearcher) run(stop func() bool) lagResult {
	q.byEnough = false
	if !q.started {
		q.started = true
		if !q.start() {
			q.phase = lagDone
		}
	}
	halt := func() bool {
		if q.res.closed {
			return true
		}
		if q.lp.enough != nil && q.lp.enough(q.res.lb, q.res.x != nil) {
			q.byEnough = true
			return true
		}
		return stop != nil && stop()
	}
	for q.phase == lagDoubling {
		if q.overflow {
			if halt() {
				return q.res
			}
			q.overflow = false
			q.lo, q.mu = q.mu, 2*q.mu
			if q.step++; q.step == lagDoublings {
				q.phase = lagDone // no μ tried made a plan fit
			}
			continue
		}
		fitted, paused := q.solveAt(q.mu, stop)
		if paused {
			q.byEnough = true
			return q.res
		}
		if fitted {
			q.hi, q.phase, q.step = q.mu, lagBisecting, 0
			break
		}
		q.res.mu, q.overflow = q.mu, true
	}
	for q.phase == lagBisecting {
		if q.cur == nil { // not a paused solve's to go on with
			if q.step == lagBisect || halt() {
				if !q.byEnough {
					q.phase = lagDone
				}
				return q.res
			}
			q.mu = (q.lo + q.hi) / 2
		}
		fitted, paused := q.solveAt(q.mu, stop)
		if paused {
			q.byEnough = true
			return q.res
		}
		if fitted {
			q.hi = q.mu
		} else {
			q.lo, q.res.mu = q.mu, q.mu
		}
		q.step++
	}
	return q.res
}
