package sharding

import (
	"math"
)

// An exact solver with a certificate for the sharding ILP, tried before lp_solve
// (certify.go builds its model from a planner; docs/DECISIONS.md, "A certificate before
// lp_solve").
//
// The ILP over integral node choices is a discrete energy: one variable per representative
// group, its labels the group's strategies, and
//
//	E(x) = constant + Σ_v unary_v(x_v) + Σ pair tables cost[rowOf(x_a)][colOf(x_m)]
//	       + Σ or-factors c·[every member's label is not "kill" ∧ some member's is "trigger"]
//
// (an or-factor is one shared value's y variable: the producer in the right class, and
// some consumer wanting the layout). Dual block-coordinate ascent on the local polytope
// (SRMP, Kolmogorov 2015: TRW-S's sequential schedule generalized to factors of any
// arity) keeps a reparametrization of E — messages moved between factors and their
// variables, which leave E(x) unchanged for every x — and
//
//	LB = constant + Σ_v min θ̂_v + Σ_f min θ̂_f ≤ min E,
//
// whatever the messages are. A labeling decoded from the messages, improved by ICM, gives
// UB = E(x). UB − LB ≤ tolerance proves x optimal to that tolerance. Only the bound's
// validity matters for the proof: the schedule, the weights and the decoding change how
// often and how fast it closes, never whether a closed certificate is right.

// mpModel is the energy: plain data, no planner inside.
type mpModel struct {
	labels   []int       // per variable: its number of labels (≥ 1)
	unary    [][]float64 // per variable, per label
	factors  []mpFactor
	constant float64
}

// mpFactor is a table over its variables' label classes, or an or-factor.
type mpFactor struct {
	vars []int // distinct variables
	or   bool
	// A table: classOf[i][x] is the class of label x of vars[i], dims[i] the number of
	// classes, cost the table, row-major (the last member's class varies fastest).
	classOf [][]int
	dims    []int
	cost    []float64
	// An or-factor: c ≥ 0, cat[i][x] the category of label x of vars[i].
	c   float64
	cat [][]uint8
}

// pairFactor is the table of a pair: cost[rowOf[x_a]*nc + colOf[x_m]].
func pairFactor(a, m int, rowOf, colOf []int, nc int, cost []float64) mpFactor {
	return mpFactor{vars: []int{a, m}, classOf: [][]int{rowOf, colOf}, dims: []int{len(cost) / nc, nc}, cost: cost}
}

// Label categories of an or-factor's member.
const (
	catNeutral uint8 = iota
	catTrigger       // this label makes the event happen, unless a member kills it
	catKill          // this label rules the event out (the producer out of the class)
)

// energy is E(x).
func (m *mpModel) energy(x []int) float64 {
	e := m.constant
	for v, u := range m.unary {
		e += u[x[v]]
	}
	for i := range m.factors {
		e += m.factors[i].value(x)
	}
	return e
}

// value is the factor's cost under labeling x.
func (f *mpFactor) value(x []int) float64 {
	if !f.or {
		at := 0
		for i, v := range f.vars {
			at = at*f.dims[i] + f.classOf[i][x[v]]
		}
		return f.cost[at]
	}
	trig := false
	for i, v := range f.vars {
		switch f.cat[i][x[v]] {
		case catKill:
			return 0
		case catTrigger:
			trig = true
		}
	}
	if trig {
		return f.c
	}
	return 0
}

// mpSolver holds the messages: msg[f][i][x] moves cost from factor f to its i-th variable,
// so θ̂_v = unary_v + Σ msg and θ̂_f = θ_f − Σ_i msg[f][i](x_{vars[i]}).
type mpSolver struct {
	m   *mpModel
	msg [][][]float64
	adj [][]mpRef // per variable: its factors
	// scratch
	theta, buf, mineBuf []float64
	best, bestBuf       [][]float64
	// rowMin[f], when rowOK[f], is tableMin's row minima of table f under its last
	// member's current messages (tableMinRows): pass clears them all when it starts and
	// f's when it writes msg[f][last], so that they always match the messages. Messages
	// are written only by pass (and by a caller before run, which starts with a pass).
	rowMin [][]float64
	rowOK  []bool
	// cls[f][i], when clsOK[f][i], is the least of −msg[f][i] per class of member i of
	// table f (minMarginal's best for a member not held), kept the same way.
	cls      [][][]float64
	clsOK    [][]bool
	noRowMin bool // never keep rowMin nor cls (a test's reference)
}

// mpRef is variable's place in a factor: factor f, member i.
type mpRef struct{ f, i int }

func newMPSolver(m *mpModel) *mpSolver {
	s := &mpSolver{m: m, msg: make([][][]float64, len(m.factors)), adj: make([][]mpRef, len(m.labels)),
		rowMin: make([][]float64, len(m.factors)), rowOK: make([]bool, len(m.factors)),
		cls: make([][][]float64, len(m.factors)), clsOK: make([][]bool, len(m.factors))}
	most, arity := 0, 0
	for _, n := range m.labels {
		most = max(most, n)
	}
	for f := range m.factors {
		fa := &m.factors[f]
		arity = max(arity, len(fa.vars))
		s.msg[f] = make([][]float64, len(fa.vars))
		for i, v := range fa.vars {
			s.msg[f][i] = make([]float64, m.labels[v])
			s.adj[v] = append(s.adj[v], mpRef{f, i})
		}
	}
	s.theta = make([]float64, most)
	s.buf = make([]float64, most)
	s.best, s.bestBuf = make([][]float64, arity), make([][]float64, arity)
	return s
}

// minMarginal writes into out, for every label of member j of factor f, the least of
// θ_f − Σ_{i≠j} msg[f][i] over the other members' labels; a member with fixed[v] ≥ 0 is
// held at that label (fixed may be nil).
func (s *mpSolver) minMarginal(f, j int, fixed []int, out []float64) {
	fa := &s.m.factors[f]
	if fa.or {
		s.orMarginal(f, j, fixed, out)
		return
	}
	// best[i][c]: the least of −msg over member i's labels in class c (member j: 0).
	best := s.best[:len(fa.vars)]
	for i, v := range fa.vars {
		if i != j && !s.noRowMin && (fixed == nil || fixed[v] < 0) {
			best[i] = s.classMins(f, i)
			continue
		}
		b := growTo(&s.bestBuf[i], fa.dims[i])
		for c := range b {
			b[c] = math.Inf(1)
			if i == j {
				b[c] = 0
			}
		}
		if i != j {
			mg := s.msg[f][i]
			for x, c := range fa.classOf[i] {
				if fixed != nil && fixed[v] >= 0 && fixed[v] != x {
					continue
				}
				b[c] = min(b[c], -mg[x])
			}
		}
		best[i] = b
	}
	mine := growTo(&s.mineBuf, fa.dims[j])
	for c := range mine {
		mine[c] = math.Inf(1)
	}
	var rows []float64
	if last := len(fa.vars) - 1; !s.noRowMin && last >= 2 && j != last && (fixed == nil || fixed[fa.vars[last]] < 0) {
		// best[last] is −msg's least per class, as for every call since the messages
		// last changed: the row minima of the previous call still hold.
		rows = s.rowMin[f]
		if !s.rowOK[f] {
			if rows == nil {
				rows = make([]float64, len(fa.cost)/fa.dims[last])
				s.rowMin[f] = rows
			}
			tableMinRows(fa, best[last], rows)
			s.rowOK[f] = true
		}
	}
	tableMin(fa, best, j, mine, rows)
	for x, c := range fa.classOf[j] {
		out[x] = mine[c]
	}
}

// classMins is cls[f][i], worked out again when msg[f][i] changed since (see mpSolver).
func (s *mpSolver) classMins(f, i int) []float64 {
	if s.cls[f] == nil {
		n := len(s.m.factors[f].vars)
		s.cls[f], s.clsOK[f] = make([][]float64, n), make([]bool, n)
	}
	b := s.cls[f][i]
	if s.clsOK[f][i] {
		return b
	}
	fa := &s.m.factors[f]
	if b == nil {
		b = make([]float64, fa.dims[i])
		s.cls[f][i] = b
	}
	for c := range b {
		b[c] = math.Inf(1)
	}
	mg := s.msg[f][i]
	for x, c := range fa.classOf[i] {
		b[c] = min(b[c], -mg[x])
	}
	s.clsOK[f][i] = true
	return b
}

// tableMin sets mine[c] to the least of cost + Σ_i best[i][class_i] over the cells whose
// member j is in class c. A two-member table, the common case, runs without the odometer.
// rowMin, when not nil (only for j ≠ the last member), holds for every row of the table
// (the cells that share all members' classes but the last's) the least of
// cost + best[last] over the row, as tableMinRows computes it; tableMin then reads it
// instead of scanning the row. The answer is the same, bit for bit, as without it.
func tableMin(fa *mpFactor, best [][]float64, j int, mine, rowMin []float64) {
	if len(fa.vars) == 2 {
		nr, nc := fa.dims[0], fa.dims[1]
		for r := range nr {
			br := best[0][r]
			row := fa.cost[r*nc : r*nc+nc]
			if j == 0 {
				m := math.Inf(1)
				for c, x := range row {
					m = min(m, x+best[1][c])
				}
				mine[r] = min(mine[r], m+br)
				continue
			}
			if math.IsInf(br, 1) { // a member held at another class: no cell of the row
				continue
			}
			for c, x := range row {
				mine[c] = min(mine[c], x+br)
			}
		}
		return
	}
	// The last member's classes run innermost: a row of the table shares the others' sum
	// pre = ((0 + best[0][c_0]) + best[1][c_1]) + …, kept per level (pres[i]: the sum of
	// the first i terms, in that order, so the same float as summing each row afresh).
	// A term +∞ (a member held at another class, decode) makes every cell below it +∞,
	// which no minimum takes: its rows are skipped. No term is −∞ nor NaN (the costs and
	// messages are finite), so the skipped cells would have left mine as it is.
	last := len(fa.vars) - 1
	nl, bl := fa.dims[last], best[last]
	if last == 0 { // one member: one row, its sum 0
		pre := 0.0
		for c, x := range fa.cost[:nl] {
			mine[c] = min(mine[c], x+pre+bl[c])
		}
		return
	}
	// The members before inner run through an odometer, inner's classes (one row each) in
	// a loop of their own (cellsMin, rowsMin).
	inner := last - 1
	var idx [mpMaxArity]int
	var pres [mpMaxArity]float64
	var span [mpMaxArity]int // span[i]: the rows one class of member i covers
	span[inner] = 1
	for i := inner - 1; i >= 0; i-- {
		span[i] = span[i+1] * fa.dims[i+1]
	}
	row := 0 // the first row under idx[:i+1]
	for i := 0; ; {
		if i < inner {
			// Member i's next class whose term is finite; past its last, up a level.
			for idx[i] < fa.dims[i] && math.IsInf(best[i][idx[i]], 1) {
				idx[i]++
				row += span[i]
			}
			if idx[i] == fa.dims[i] {
				if i == 0 {
					return
				}
				idx[i] = 0
				i--
				idx[i]++
				continue
			}
			pres[i+1] = pres[i] + best[i][idx[i]]
			i++
			continue
		}
		// inner's rows: idx[:inner] set, pres[inner] the sum of their terms.
		bi, p0 := best[inner], pres[inner]
		switch {
		case j == last:
			cellsMin(fa.cost, row, nl, p0, bi, bl, mine)
		case j == inner:
			for c, t := range bi {
				if !math.IsInf(t, 1) {
					mine[c] = min(mine[c], rowAt(fa.cost, row+c, nl, bl, rowMin)+(p0+t))
				}
			}
		default:
			mine[idx[j]] = rowsMin(fa.cost, row, nl, p0, bi, bl, mine[idx[j]], rowMin)
		}
		row += fa.dims[inner]
		if inner == 0 {
			return
		}
		i = inner - 1
		idx[i]++
	}
}

// cellsMin is tableMin's step for the last member over the rows of inner's classes: row
// r0+c has the sum p0 + bi[c], and each of its cells x takes mine[k] to x + sum + bl[k].
func cellsMin(cost []float64, r0, nl int, p0 float64, bi, bl, mine []float64) {
	bl, mine = bl[:nl], mine[:nl]
	for c, t := range bi {
		if math.IsInf(t, 1) {
			continue
		}
		pre := p0 + t
		r := r0 + c
		for k, x := range cost[r*nl : r*nl+nl] {
			mine[k] = min(mine[k], x+pre+bl[k])
		}
	}
}

// rowsMin is the least of m and, over the rows r0+c of inner's classes, the row's
// minimum (rowAt) plus its sum p0 + bi[c].
func rowsMin(cost []float64, r0, nl int, p0 float64, bi, bl []float64, m float64, rowMin []float64) float64 {
	for c, t := range bi {
		if !math.IsInf(t, 1) {
			m = min(m, rowAt(cost, r0+c, nl, bl, rowMin)+(p0+t))
		}
	}
	return m
}

// rowAt is row r's least of cost + bl: rowMin's when kept, else scanned.
func rowAt(cost []float64, r, nl int, bl, rowMin []float64) float64 {
	if rowMin != nil {
		return rowMin[r]
	}
	return rowMinOf(cost[r*nl:r*nl+nl], bl)
}

// rowMinOf is the least of cells[c] + bl[c].
func rowMinOf(cells, bl []float64) float64 {
	bl = bl[:len(cells)]
	m := math.Inf(1)
	for c, x := range cells {
		m = min(m, x+bl[c])
	}
	return m
}

// tableMinRows fills rowMin, per row of a table of three or more members, with the least
// of cost + bl over the row (see tableMin).
func tableMinRows(fa *mpFactor, bl, rowMin []float64) {
	nl := fa.dims[len(fa.dims)-1]
	for r := range rowMin {
		rowMin[r] = rowMinOf(fa.cost[r*nl:r*nl+nl], bl)
	}
}

// mpMaxArity bounds a table's members (certify.go's table keeps to it).
const mpMaxArity = 16

// growTo returns *buf resized to n, reallocating only when it is too small.
func growTo(buf *[]float64, n int) []float64 {
	if cap(*buf) < n {
		*buf = make([]float64, n)
	}
	*buf = (*buf)[:n]
	return *buf
}

// orMarginal is minMarginal for an or-factor: each other member enters through the least
// of −msg over its labels of each category, and the event's cost c ≥ 0 is paid when no
// member kills it and some member triggers it.
func (s *mpSolver) orMarginal(f, j int, fixed []int, out []float64) {
	fa := &s.m.factors[f]
	inf := math.Inf(1)
	var sum3, sumTN, sumN float64 // Σ over others of min(all), min(trigger, neutral), neutral
	killGain := inf               // least extra cost of making some other member kill
	for i, v := range fa.vars {
		if i == j {
			continue
		}
		var m [3]float64
		m[0], m[1], m[2] = inf, inf, inf
		for x, q := range fa.cat[i] {
			if fixed != nil && fixed[v] >= 0 && fixed[v] != x {
				continue
			}
			m[q] = min(m[q], -s.msg[f][i][x])
		}
		m3 := min(m[0], m[1], m[2])
		sum3 += m3
		sumTN += min(m[0], m[1])
		sumN += m[0]
		if m[2] < inf {
			killGain = min(killGain, m[2]-m3)
		}
	}
	var val [3]float64
	val[catKill] = sum3
	killed := sum3 + killGain
	val[catTrigger] = min(killed, fa.c+sumTN)
	val[catNeutral] = min(killed, sumN, fa.c+sumTN)
	for x, q := range fa.cat[j] {
		out[x] = val[q]
	}
}

// pass runs one SRMP sweep over the variables in order (forward) or reversed: each
// variable takes in the min-marginals of its factors with a member before it in the
// sweep, then hands its reparametrized unary back, in equal shares, to those with a
// member after it.
func (s *mpSolver) pass(forward bool) {
	n := len(s.m.labels)
	clear(s.rowOK)
	for _, ok := range s.clsOK {
		clear(ok)
	}
	for step := range n {
		v := step
		if !forward {
			v = n - 1 - step
		}
		before := func(u int) bool { return forward && u < v || !forward && u > v }
		after := func(u int) bool { return forward && u > v || !forward && u < v }
		nIn, nOut := 0, 0
		for _, r := range s.adj[v] {
			in, out := false, false
			for _, u := range s.m.factors[r.f].vars {
				in, out = in || before(u), out || after(u)
			}
			if in {
				nIn++
				s.minMarginal(r.f, r.i, nil, s.msg[r.f][r.i])
				s.wrote(r)
			}
			if out {
				nOut++
			}
		}
		if nOut == 0 {
			continue
		}
		th := s.theta[:s.m.labels[v]]
		copy(th, s.m.unary[v])
		for _, r := range s.adj[v] {
			for x, w := range s.msg[r.f][r.i] {
				th[x] += w
			}
		}
		w := 1 / float64(max(nIn, nOut))
		for _, r := range s.adj[v] {
			out := false
			for _, u := range s.m.factors[r.f].vars {
				out = out || after(u)
			}
			if !out {
				continue
			}
			mg := s.msg[r.f][r.i]
			for x := range mg {
				mg[x] -= w * th[x]
			}
			s.wrote(r)
		}
	}
}

// wrote notes that pass changed msg[r.f][r.i]: r's class minima, and the row minima of
// r.f when r is its last member, no longer hold.
func (s *mpSolver) wrote(r mpRef) {
	if r.i == len(s.m.factors[r.f].vars)-1 {
		s.rowOK[r.f] = false
	}
	if s.clsOK[r.f] != nil {
		s.clsOK[r.f][r.i] = false
	}
}

// bound is the dual bound of the current messages: a lower bound on min E.
func (s *mpSolver) bound() float64 {
	lb := s.m.constant
	for v, u := range s.m.unary {
		th := s.theta[:len(u)]
		copy(th, u)
		for _, r := range s.adj[v] {
			for x, w := range s.msg[r.f][r.i] {
				th[x] += w
			}
		}
		lb += minOf(th)
	}
	for f := range s.m.factors {
		// min θ̂_f = min over member 0's labels of its min-marginal minus its message.
		mg := s.buf[:len(s.msg[f][0])]
		s.minMarginal(f, 0, nil, mg)
		b := math.Inf(1)
		for x, w := range s.msg[f][0] {
			b = min(b, mg[x]-w)
		}
		lb += b
	}
	return lb
}

func minOf(xs []float64) float64 {
	b := math.Inf(1)
	for _, x := range xs {
		b = min(b, x)
	}
	return b
}

// decode labels the variables in order, each at the least of its unary plus, per factor,
// the factor's conditional min-marginal given the variables already labeled (TRW-S's
// rule); ties go to the lowest label.
func (s *mpSolver) decode() []int {
	x := make([]int, len(s.m.labels))
	for v := range x {
		x[v] = -1
	}
	for v := range x {
		th := s.theta[:s.m.labels[v]]
		copy(th, s.m.unary[v])
		mg := s.buf[:len(th)]
		for _, r := range s.adj[v] {
			s.minMarginal(r.f, r.i, x, mg)
			for k := range th {
				th[k] += mg[k]
			}
		}
		x[v] = argminOf(th)
	}
	return x
}

func argminOf(xs []float64) int {
	best := 0
	for i, x := range xs {
		if x < xs[best] {
			best = i
		}
	}
	return best
}

// icm improves x in place, one variable at a time, to its best label with the others
// held (iterated conditional modes), until no single change lowers E or rounds run out.
// A table's cell under x with v at label k is at[r] + classOf[r.i][k]·stride[r] (the
// others' classes held), so a label costs a lookup per table instead of a walk.
func (m *mpModel) icm(x []int, adj [][]mpRef, rounds int) {
	var at, stride []int
	for range rounds {
		changed := false
		for v := range x {
			cur := x[v]
			at, stride = at[:0], stride[:0]
			for _, r := range adj[v] {
				a, st := m.factors[r.f].cellWithout(r.i, x)
				at, stride = append(at, a), append(stride, st)
			}
			best, bestE := cur, math.Inf(1)
			for k := range m.labels[v] {
				x[v] = k
				e := m.unary[v][k]
				for ri, r := range adj[v] {
					f := &m.factors[r.f]
					if f.or {
						e += f.value(x)
						continue
					}
					e += f.cost[at[ri]+f.classOf[r.i][k]*stride[ri]]
				}
				if e < bestE || e == bestE && k == cur {
					best, bestE = k, e
				}
			}
			x[v] = best
			changed = changed || best != cur
		}
		if !changed {
			return
		}
	}
}

// cellWithout is, for a table, the index value computes under x with member i's class
// taken as 0, and the stride of member i's class in it (an or-factor: 0, 0).
func (f *mpFactor) cellWithout(i int, x []int) (at, stride int) {
	if f.or {
		return 0, 0
	}
	stride = 1
	for m, v := range f.vars {
		c := 0
		if m != i {
			c = f.classOf[m][x[v]]
		}
		at = at*f.dims[m] + c
		if m > i {
			stride *= f.dims[m]
		}
	}
	return at, stride
}

// mpResult is what certify found: the best labeling, its energy, the bound, the passes.
type mpResult struct {
	x      []int
	ub, lb float64
	iters  int
	closed bool // ub − lb within the tolerance: x is optimal
}

// Certificate tolerance: lp_solve's own default MIP gaps (ilp.Optimal), 1e-11 absolute
// and 1e-9 relative. UB − LB ≤ max(mpGapAbs, mpGapRel·|UB|) proves x optimal as
// precisely as lp_solve's "optimal" does.
const (
	mpGapAbs = 1e-11
	mpGapRel = 1e-9
)

func mpClosed(ub, lb float64) bool {
	return ub-lb <= max(mpGapAbs, mpGapRel*math.Abs(ub))
}

// solveMP runs up to maxIters forward-backward sweeps, decoding after each, and stops as
// soon as the certificate closes, or once the last stall sweeps raised the bound by less
// than a tenth of the gap left (it would not close in reasonable time). The answer
// depends on the model alone (no clocks, no maps); stop, when it reports true before a
// sweep, ends the search early with the certificate open (nil: never).
func solveMP(m *mpModel, maxIters, stall int, stop func() bool) mpResult {
	return newMPSolver(m).run(maxIters, stall, stop, nil)
}

// run is solveMP on s's model from s's messages as they are: a later run after the model's
// unaries or constant changed starts warm (the bound stays valid for any messages). visit,
// when not nil, sees every labeling decoded (after ICM; it must not keep x).
func (s *mpSolver) run(maxIters, stall int, stop func() bool, visit func(x []int)) mpResult {
	r := &mpRun{maxIters: maxIters, stall: stall, res: mpResult{ub: math.Inf(1), lb: math.Inf(-1)}}
	s.sweeps(r, stop, visit, nil)
	return r.res
}

// mpRun is a run of the solver (run) that can pause between its sweeps and go on: the
// sweeps made, the bound after each, the best labeling.
type mpRun struct {
	maxIters, stall int
	res             mpResult
	lbs             []float64 // the bound after each sweep
	ended           bool      // the run closed, stalled or made maxIters sweeps
}

// sweeps goes on with r until it ends, stop reports true before a sweep, or pause reports
// true of the bound after one (nil: never; then it reports true). A run paused and gone on
// makes the same sweeps as one never paused.
func (s *mpSolver) sweeps(r *mpRun, stop func() bool, visit func(x []int), pause func(lb float64) bool) (paused bool) {
	m, res := s.m, &r.res
	for it := res.iters + 1; it <= r.maxIters; it++ {
		if stop != nil && stop() {
			return false
		}
		s.pass(true)
		s.pass(false)
		res.iters = it
		res.lb = max(res.lb, s.bound())
		r.lbs = append(r.lbs, res.lb)
		x := s.decode()
		m.icm(x, s.adj, 4)
		if visit != nil {
			visit(x)
		}
		if e := m.energy(x); e < res.ub {
			res.ub, res.x = e, x
		}
		if mpClosed(res.ub, res.lb) {
			res.closed, r.ended = true, true
			return false
		}
		if it > r.stall && res.lb-r.lbs[it-1-r.stall] < 0.1*(res.ub-res.lb) {
			r.ended = true
			return false
		}
		if pause != nil && pause(res.lb) {
			return true
		}
	}
	r.ended = true
	return false
}

// fillTable writes t.cost (zeroed, t.dims set) from parts, read through at and of
// (tableParts): each cell the sum, in the parts' order from 0, of every part's value at the
// cell's classes — partValue's value, the same bits as adding partValue cell by cell
// (TestTableCostsSameBits). It runs row by row, a row being the cells that differ in the
// last member's class only: a part's members before the last are read once per row (a
// table's offset; an or-factor's state: killed, triggered, or waiting on the last member),
// so that a cell costs one look-up per part instead of one per part member; a part without
// the last member keeps its value until one of its members' classes changes (the odometer
// moved members from changed on).
func fillTable(t *mpFactor, parts []mpFactor, at [][]int, of [][][]int) {
	last := len(t.dims) - 1
	dl := t.dims[last]
	np := len(parts)
	lastK := make([]int, np)  // the part's member at the last place, or −1
	stride := make([]int, np) // a table part's stride of that member
	// prefAt: the part's last place among the members before the last one (−1: none; a
	// part without members is read every row)
	prefAt := make([]int, np)
	for i := range parts {
		lastK[i], stride[i], prefAt[i] = -1, 1, -1
		if len(at[i]) == 0 {
			prefAt[i] = last
		}
		for k, a := range at[i] {
			if a != last {
				prefAt[i] = max(prefAt[i], a)
				continue
			}
			lastK[i] = k
			if !parts[i].or {
				for _, d := range parts[i].dims[k+1:] {
					stride[i] *= d
				}
			}
		}
	}
	// row[i] is part i's value at the row's cells: its own slice of buf (a part without the
	// last member: its value, dl times; a table's slice of the last member's classes), or,
	// an or-factor with the last member, one of its three rows: 0, where a member before
	// the last kills the event; orTrig[i], where one triggers it (f.c unless the last
	// member kills it); orWait[i], where none does (f.c where the last member triggers).
	buf := make([]float64, np*dl)
	row := make([][]float64, np)
	zero := make([]float64, dl)
	orTrig, orWait := make([][]float64, np), make([][]float64, np)
	for i := range parts {
		row[i] = buf[i*dl : (i+1)*dl]
		f := &parts[i]
		if !f.or || lastK[i] < 0 {
			continue
		}
		orTrig[i], orWait[i] = make([]float64, dl), make([]float64, dl)
		for c, cat := range of[i][lastK[i]] {
			switch uint8(cat) {
			case catKill:
			case catTrigger:
				orTrig[i][c], orWait[i][c] = f.c, f.c
			default:
				orTrig[i][c] = f.c
			}
		}
	}
	idx := make([]int, last) // the row: the classes of the members before the last
	changed := -1            // the first place whose class changed since the last row (−1: none read yet)
	for at0 := 0; at0 < len(t.cost); at0 += dl {
		for i := range parts {
			if prefAt[i] < changed {
				continue // no member before the last changed class: the row holds still
			}
			f, k0 := &parts[i], lastK[i]
			if k0 < 0 {
				v := partValue(f, at[i], of[i], idx)
				r := row[i]
				for c := range r {
					r[c] = v
				}
				continue
			}
			if !f.or {
				a := 0
				for k := range f.vars {
					o := 0
					if k != k0 {
						o = of[i][k][idx[at[i][k]]]
					}
					a = a*f.dims[k] + o
				}
				r := row[i]
				for c := range r {
					r[c] = f.cost[a+of[i][k0][c]*stride[i]]
				}
				continue
			}
			killed, trig := false, false
			for k := range f.vars {
				if k == k0 {
					continue
				}
				switch uint8(of[i][k][idx[at[i][k]]]) {
				case catKill:
					killed = true
				case catTrigger:
					trig = true
				}
				if killed {
					break
				}
			}
			switch {
			case killed:
				row[i] = zero
			case trig:
				row[i] = orTrig[i]
			default:
				row[i] = orWait[i]
			}
		}
		// Each cell adds the parts up in their order from 0 (t.cost starts zeroed), as
		// partValue's sum did; a part at a time runs along the row.
		cells := t.cost[at0 : at0+dl]
		for _, r := range row {
			for c, v := range r[:dl] {
				cells[c] += v
			}
		}
		changed = last
		for i := last - 1; i >= 0; i-- {
			if idx[i]++; idx[i] < t.dims[i] {
				changed = i
				break
			}
			idx[i] = 0
		}
	}
}
