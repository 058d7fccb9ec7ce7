package sharding

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/autopar/autopar/ilp"
	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/mesh"
)

// Sweeps of the message-passing solver (msgpass.go) before the planner gives the ILP to
// lp_solve: at most mpMaxIters, and no more once the bound has stalled for mpStall.
const (
	mpMaxIters = 300
	mpStall    = 30
)

// energyModel reads the ILP buildILP wrote (before any holding variable or memory row) as
// a discrete energy over the representative groups' strategies, equal to the ILP's
// objective at p.assignment(choice) for every choice (TestEnergyEqualsILP). It returns the
// model and, per group, its variable in it; an error when the ILP has a term the model
// cannot express (then lp_solve answers alone).
func (p *planner) energyModel() (*mpModel, []int, error) {
	nv := p.prob.NumVars()
	coef := make([]float64, nv)
	for _, t := range p.prob.Objective {
		coef[t.Var] += t.Coef
	}
	used := make([]bool, nv)
	m := &mpModel{constant: p.prob.ObjConstant}
	mv := make([]int, len(p.groups))
	for gi := range p.groups {
		if p.rep[gi] != gi {
			continue
		}
		mv[gi] = len(m.labels)
		u := make([]float64, len(p.s[gi]))
		for k, sv := range p.s[gi] {
			u[k], used[sv] = coef[sv], true
		}
		m.labels, m.unary = append(m.labels, len(u)), append(m.unary, u)
	}
	for gi := range p.groups {
		mv[gi] = mv[p.rep[gi]]
	}
	type cell struct{ e, r, c int }
	cellOf := map[ilp.VarID]cell{}
	for ei, e := range p.edgeRecs {
		nr, nc := len(e.vars), len(e.vars[0])
		cost := make([]float64, nr*nc)
		zero := true
		for r := range nr {
			for c := range nc {
				z := e.vars[r][c]
				cellOf[z], used[z] = cell{ei, r, c}, true
				cost[r*nc+c] = coef[z]
				zero = zero && coef[z] == 0
			}
		}
		a, b := mv[e.a], mv[e.m]
		switch {
		case zero:
		case a == b: // one group on both sides: both classes are its strategy's
			for k := range m.unary[a] {
				m.unary[a][k] += cost[e.rowOf[k]*nc+e.colOf[k]]
			}
		default:
			m.factors = append(m.factors, pairFactor(a, b, e.rowOf, e.colOf, nc, cost))
		}
	}
	// Each y is the max of its events (sharedRec): an or-factor.
	var ys []ilp.VarID
	recs := map[ilp.VarID][]sharedRec{}
	for _, r := range p.sharedRecs {
		if _, ok := recs[r.y]; !ok {
			ys = append(ys, r.y)
		}
		recs[r.y] = append(recs[r.y], r)
	}
	var order []ir.ValueID
	byValue := map[ir.ValueID][]mpFactor{}
	for _, y := range ys {
		used[y] = true
		c := coef[y]
		if c == 0 {
			continue
		}
		f, err := m.orOf(mv, c, recs[y], func(z ilp.VarID) (edgeRec, int, int) {
			at := cellOf[z]
			return p.edgeRecs[at.e], at.r, at.c
		})
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", p.prob.VarName(y), err)
		}
		if f.vars == nil {
			continue // folded into a unary
		}
		v := recs[y][0].v
		if _, ok := byValue[v]; !ok {
			order = append(order, v)
		}
		byValue[v] = append(byValue[v], f)
	}
	for _, v := range order {
		m.addShared(byValue[v])
	}
	for v, c := range coef {
		if c != 0 && !used[v] {
			return nil, nil, fmt.Errorf("sharding: the energy model has no place for %s's cost", p.prob.VarName(ilp.VarID(v)))
		}
	}
	return m, mv, nil
}

// orOf returns the or-factor of one y of cost c ≥ 0 with its rows recs: y is 1 exactly when
// some rec's event holds — the producer's strategy in a class and a consumer's in another
// (rows y ≥ z) or a consumer's in a class (rows y ≥ Σ s). A y whose events are of both
// kinds, or whose producer events differ, is not of the factor's form.
func (m *mpModel) orOf(mv []int, c float64, recs []sharedRec, cellAt func(ilp.VarID) (edgeRec, int, int)) (mpFactor, error) {
	if c < 0 {
		return mpFactor{}, fmt.Errorf("sharding: a shared resharding of negative cost %g", c)
	}
	var vars []int
	cats := map[int][]uint8{}
	member := func(v int) []uint8 {
		if _, ok := cats[v]; !ok {
			vars = append(vars, v)
			cats[v] = make([]uint8, m.labels[v])
		}
		return cats[v]
	}
	prod := -1
	var inClass []bool // the producer's labels in the class
	trig := func(g int, of []int, cls int) {
		cat := member(mv[g])
		for k, x := range of {
			if x == cls && cat[k] != catKill {
				cat[k] = catTrigger
			}
		}
	}
	zs, ss := 0, 0
	for _, r := range recs {
		if r.z < 0 {
			ss++
			continue
		}
		zs++
		e, row, _ := cellAt(r.z)
		in := make([]bool, len(e.rowOf))
		for k, x := range e.rowOf {
			in[k] = x == row
		}
		if prod >= 0 && (prod != mv[e.a] || !slices.Equal(in, inClass)) {
			return mpFactor{}, fmt.Errorf("sharding: a shared value's events with different producer classes")
		}
		prod, inClass = mv[e.a], in
	}
	if zs > 0 && ss > 0 {
		return mpFactor{}, fmt.Errorf("sharding: a shared value's events of two kinds")
	}
	if prod >= 0 {
		cat := member(prod)
		for k, in := range inClass {
			if !in {
				cat[k] = catKill
			}
		}
	}
	for _, r := range recs {
		if r.z < 0 {
			trig(r.m, r.colOf, r.c)
			continue
		}
		e, _, col := cellAt(r.z)
		trig(e.m, e.colOf, col)
	}
	if len(vars) == 1 {
		for k, q := range cats[vars[0]] {
			if q == catTrigger {
				m.unary[vars[0]][k] += c
			}
		}
		return mpFactor{}, nil
	}
	slices.Sort(vars)
	f := mpFactor{vars: vars, or: true, c: c}
	for _, v := range vars {
		f.cat = append(f.cat, cats[v])
	}
	return f, nil
}

// maxTableCells bounds the table addShared makes of one shared value's factors.
const maxTableCells = 1 << 16

// addShared adds the or-factors of one shared value as one table over the union of their
// variables, with the pair tables already in m whose variables it covers, when that table
// has at most maxTableCells cells; otherwise it adds them as they are. Message passing
// gets stuck on many small overlapping factors (each or-factor alone is nearly flat); one
// table per value lets a single block update see the value's whole price.
func (m *mpModel) addShared(ors []mpFactor) {
	var vars []int
	for _, f := range ors {
		for _, v := range f.vars {
			if !slices.Contains(vars, v) {
				vars = append(vars, v)
			}
		}
	}
	slices.Sort(vars)
	var pairs []int
	for i, f := range m.factors {
		if !f.or && len(f.vars) == 2 && slices.Contains(vars, f.vars[0]) && slices.Contains(vars, f.vars[1]) {
			pairs = append(pairs, i)
		}
	}
	t, ok := m.table(vars, ors, pairs)
	if !ok {
		pairs = nil
		if t, ok = m.table(vars, ors, nil); !ok {
			m.factors = append(m.factors, ors...)
			return
		}
	}
	for i := len(pairs) - 1; i >= 0; i-- {
		m.factors = slices.Delete(m.factors, pairs[i], pairs[i]+1)
	}
	m.factors = append(m.factors, t)
}

// table writes factors parts (ors, and the factors of m at pairs) over vars as one table:
// a label's class is the tuple of its categories and classes in the parts. It reports
// false when the table would exceed maxTableCells or mpMaxArity members.
func (m *mpModel) table(vars []int, ors []mpFactor, pairs []int) (mpFactor, bool) {
	if len(vars) > mpMaxArity {
		return mpFactor{}, false
	}
	parts := slices.Clone(ors)
	for _, i := range pairs {
		parts = append(parts, m.factors[i])
	}
	t := mpFactor{vars: vars}
	size := 1
	reps := make([][]int, len(vars)) // per member, per class: its first label
	for i, v := range vars {
		of := make([]int, m.labels[v])
		seen := map[string]int{}
		var sig []byte
		for x := range of {
			sig = sig[:0]
			for _, f := range parts {
				if at := slices.Index(f.vars, v); at >= 0 {
					if f.or {
						sig = append(sig, f.cat[at][x])
					} else {
						sig = binary.AppendUvarint(sig, uint64(f.classOf[at][x]))
					}
				}
			}
			c, ok := seen[string(sig)]
			if !ok {
				c = len(reps[i])
				seen[string(sig)] = c
				reps[i] = append(reps[i], x)
			}
			of[x] = c
		}
		t.classOf, t.dims = append(t.classOf, of), append(t.dims, len(reps[i]))
		if size *= len(reps[i]); size > maxTableCells {
			return mpFactor{}, false
		}
	}
	t.cost = make([]float64, size)
	// A cell's labels are its classes' first labels: part i's value there is
	// parts[i].value of them, read through at[i] and of[i] (tableParts).
	at, of := tableParts(vars, reps, parts)
	fillTable(&t, parts, at, of) // msgpass.go
	return t, true
}

// tableParts tells table, per part and member k of the part: at[k], the member's place
// among vars, and of[k][c], the part's class (a table) or category (an or-factor) of the
// first label of that member's class c (reps), so that partValue reads a part's value at
// a cell without spelling the cell's labels out.
func tableParts(vars []int, reps [][]int, parts []mpFactor) (at [][]int, of [][][]int) {
	at, of = make([][]int, len(parts)), make([][][]int, len(parts))
	for i := range parts {
		f := &parts[i]
		for k, v := range f.vars {
			a := slices.Index(vars, v)
			o := make([]int, len(reps[a]))
			for c, x := range reps[a] {
				if f.or {
					o[c] = int(f.cat[k][x])
				} else {
					o[c] = f.classOf[k][x]
				}
			}
			at[i], of[i] = append(at[i], a), append(of[i], o)
		}
	}
	return at, of
}

// partValue is f.value at the labels of the table cell whose classes are idx (see
// tableParts): the same cost, read the same way.
func partValue(f *mpFactor, at []int, of [][]int, idx []int) float64 {
	if !f.or {
		a := 0
		for k := range f.vars {
			a = a*f.dims[k] + of[k][idx[at[k]]]
		}
		return f.cost[a]
	}
	trig := false
	for k := range f.vars {
		switch uint8(of[k][idx[at[k]]]) {
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

// certify tries to answer the ILP without lp_solve: it solves the energy model by message
// passing and returns the choice of group strategies when its certificate proves it
// optimal (nil when not, or when the model cannot express the ILP), with the result.
func (p *planner) certify() ([]int, mpResult) {
	st, err := p.solveEnergy()
	if err != nil {
		return nil, mpResult{}
	}
	return st.closedChoice(), st.res
}

// mpState is a solved energy model: the model, its variable per group, the solver (its
// messages, to warm-start another solve) and the result.
type mpState struct {
	m   *mpModel
	mv  []int
	s   *mpSolver
	res mpResult
}

// solveEnergy builds the energy model of p's ILP and solves it (an error: the model cannot
// express the ILP).
func (p *planner) solveEnergy() (*mpState, error) {
	m, mv, err := p.energyModel()
	if err != nil {
		return nil, err
	}
	s := newMPSolver(m)
	return &mpState{m: m, mv: mv, s: s, res: s.run(mpMaxIters, mpStall, p.stop(), nil)}, nil
}

// stop reports whether p's context is done (nil: p has none).
func (p *planner) stop() func() bool {
	if p.ctx == nil {
		return nil
	}
	return func() bool { return p.ctx.Err() != nil }
}

// choice spells labeling x out per group.
func (st *mpState) choice(x []int) []int {
	if x == nil {
		return nil
	}
	choice := make([]int, len(st.mv))
	for gi, v := range st.mv {
		choice[gi] = x[v]
	}
	return choice
}

// closedChoice is the certified plan per group (nil: the certificate is open).
func (st *mpState) closedChoice() []int {
	if !st.res.closed {
		return nil
	}
	return st.choice(st.res.x)
}

// certified is solve's first try: the certificate's plan, as a Result built as from an
// lp_solve answer, when it closes and the plan fits the budget (0: none) — an optimum of
// the ILP without memory rows that fits them is an optimum with them. When the plan does
// not fit, the Lagrangian search of the memory rows (lagrange.go) runs: its plan, when its
// bound proves it optimal under the budget, is the answer. Otherwise nil, with the sweeps
// run and the best plan of the Lagrangian search that fits the budget (nil: none), the
// incumbent lp_solve must beat.
func (p *planner) certified(budget float64, stats ILPStats) (res *Result, sweeps int, incumbent []int) {
	start := time.Now()
	st, _ := p.solveEnergy() // nil: the model cannot express the ILP; lp_solve answers
	var mp mpResult
	var choice []int
	if st != nil {
		mp, choice = st.res, st.closedChoice()
	}
	fits := false
	defer func() {
		if mpTrace != nil {
			mpTrace(p.prob.NumVars(), choice != nil, fits, mp, time.Since(start))
		}
	}()
	if st == nil || st.res.x == nil {
		return nil, mp.iters, nil
	}
	free := st.choice(st.res.x)
	_, peak := p.peakOf(free)
	fits = budget <= 0 || peak <= budget
	if fits && choice == nil {
		return nil, mp.iters, nil // an open certificate: lp_solve answers
	}
	if fits {
		stats.SolveTime = time.Since(start)
		stats.Solver, stats.Sweeps = "msgpass", mp.iters
		if res := p.planResult(choice, ilp.Optimal, stats); res != nil {
			return res, mp.iters, nil
		}
		return nil, mp.iters, nil
	}
	lag := p.lagrange(st, budget, p.stop())
	sweeps = mp.iters + lag.sweeps
	if lagTrace != nil {
		lagTrace(p.prob.NumVars(), st.res, lag, time.Since(start))
	}
	status := ilp.Optimal
	if !lag.closed {
		if p.prob.NumVars() <= p.opts.LagGapAbove || !nearLag(lag, p.opts.LagGap) {
			return nil, sweeps, st.choice(lag.x)
		}
		status, stats.Bound = ilp.Feasible, lag.lb // within Options.LagGap of the optimum
	}
	stats.SolveTime = time.Since(start)
	stats.Solver, stats.Sweeps = "lagrange", sweeps
	return p.planResult(st.choice(lag.x), status, stats), sweeps, nil
}

// nearLag says whether lag found a plan that fits within gap (relative, > 0) of its lower
// bound: certified answers with it on an ILP of more than Options.LagGapAbove variables.
func nearLag(lag lagResult, gap float64) bool {
	return gap > 0 && lag.x != nil && lag.ub-lag.lb <= gap*math.Abs(lag.ub)
}

// planResult is choice's Result as solve returns an answer of the given status: the
// objective the ILP has at it (as it stands: memory rows included), its peak and copies;
// nil when its point is not feasible (cannot happen: assignment writes a feasible point of
// every choice, and solve only asks for plans that fit).
func (p *planner) planResult(choice []int, status ilp.Status, stats ILPStats) *Result {
	ev := ilp.Evaluate(p.prob, p.assignment(choice))
	if !ev.Feasible() {
		return nil
	}
	_, peak := p.peakOf(choice)
	stats.Rows, stats.Variables = p.prob.NumRows(), p.prob.NumVars()
	stats.Rounds = max(stats.Rounds, 1)
	stats.Status, stats.Objective = status.String(), ev.Objective
	res := p.result(choice, stats)
	res.PeakMemory = int64(peak)
	res.Gathered = int64(p.gatheredBytes(choice))
	return res
}

// lagTrace, when set, sees every Lagrangian search run: the ILP's variables, the free
// solve's result, the search's and the time since the free solve began.
var lagTrace func(vars int, free mpResult, lag lagResult, took time.Duration)

// mpTrace, when set, sees every certificate tried: the ILP's variables, whether it
// closed, whether its plan fit the budget, the solver's result and the time taken.
var mpTrace func(vars int, closed, fits bool, mp mpResult, took time.Duration)

// LowerBound is a lower bound on the ILP objective (ILPStats.Objective) of any plan Solve
// may return for g on lm under opts: the message-passing dual bound of the ILP without
// memory rows (certify.go), after at most mpMaxIters sweeps, and, when opts.MemoryBudget
// binds (the free plan does not fit it), the larger Lagrangian bound of the memory rows
// (lagrange.go), valid under that budget only. exact says the bound is the optimum under
// opts to within lp_solve's gaps (mpGapAbs, mpGapRel): the certificate closed and its plan
// fits the budget, or the Lagrangian search closed. It builds the planner as Solve does
// (candidates, merging, the ILP) and then costs milliseconds, not a simplex: a search
// could compare it with the best plan so far to skip a solve. An ILP the energy model
// cannot express (none the planner writes today) is an error.
func LowerBound(ctx context.Context, g *ir.Graph, lm *mesh.LogicalMesh, opts Options) (bound float64, exact bool, err error) {
	p, err := newPlannerContext(ctx, g, lm, opts)
	if err != nil {
		return 0, false, err
	}
	st, err := p.solveEnergy()
	if err != nil {
		return 0, false, err
	}
	if err := ctx.Err(); err != nil {
		return 0, false, err
	}
	bound, exact = st.res.lb, st.res.closed
	if budget := float64(opts.MemoryBudget); budget > 0 && st.res.x != nil {
		if _, peak := p.peakOf(st.choice(st.res.x)); peak > budget {
			lag := p.lagrange(st, budget, p.stop())
			if err := ctx.Err(); err != nil {
				return 0, false, err
			}
			bound, exact = max(bound, lag.lb), lag.closed
		}
	}
	return bound, exact, nil
}

// FreeDual is what FreeBound proves of a sharding ILP.
type FreeDual struct {
	// Bound is at most the ILP objective (ILPStats.Objective) of every plan Solve may
	// return for the graph on the mesh under the options' candidates, whatever their
	// MemoryBudget and Recompute: those change the memory rows only, never the candidates,
	// the merging, the cut or the objective, so the ILP without memory rows relaxes every
	// solve of it (plain, recomputing, at the least footprint or unbounded). It is the
	// message-passing dual bound (certify.go), Σ of the minima of a reparametrization of
	// the energy, which needs no optimal messages to hold.
	Bound float64
	// Closed: the certificate closed, so Bound is the optimum without memory rows (to
	// within lp_solve's gaps), and Plan its plan's objective.
	Closed bool
	// Plan is the objective of the best plan the dual decoded (an upper bound on the
	// optimum without memory rows; the plan may not fit a budget).
	Plan float64
	// PerEdgeValues are the values whose resharding the ILP prices once per consumer
	// (ILPStats.PerEdgeValues): where it is not 0 a plan's objective may exceed its
	// Result.Cost, so that Bound bounds the objective but not the cost.
	PerEdgeValues int
	// LeafValues are the inputs, constants and iotas the ILP prices once per consumer
	// (sharedValues) that it could not lay out replicated at their least own cost: where
	// it and PerEdgeValues are 0, the optimum without memory rows, so Bound, is at most
	// every plan's Result.Cost (a replicated leaf reshards into any layout for free; see
	// replicatedFree), even though a plan's objective may exceed its cost.
	LeafValues int
	Sweeps     int
	// Answer is the Result Solve returns under the same options when the certificate
	// closed and its plan fits the budget (certified's first answer; nil otherwise, and
	// under LPSolveOnly): a search may take it as the solve instead of solving again. Its
	// ILPStats.SolveTime is FreeBound's.
	Answer *Result
}

// FreeBound builds the planner as Solve does (candidates, merging, the ILP) and returns
// the dual bound of its ILP without memory rows, after at most mpMaxIters sweeps: no
// simplex, no Lagrangian search (LowerBound adds that, valid under one budget only). A
// search compares it with the best plan found to drop a stage without solving it (the
// root's range refutation, bound.go). An ILP the energy model cannot express (none the
// planner writes today) is an error.
func FreeBound(ctx context.Context, g *ir.Graph, lm *mesh.LogicalMesh, opts Options) (FreeDual, error) {
	p, err := newPlannerContext(ctx, g, lm, opts)
	start := time.Now()
	if err != nil {
		return FreeDual{}, err
	}
	st, err := p.solveEnergy()
	if err != nil {
		return FreeDual{}, err
	}
	if err := ctx.Err(); err != nil {
		return FreeDual{}, err
	}
	d := FreeDual{Bound: st.res.lb, Closed: st.res.closed, Plan: st.res.ub, PerEdgeValues: p.perEdge, LeafValues: p.leavesPriced, Sweeps: st.res.iters}
	choice := st.closedChoice()
	if choice == nil || p.opts.LPSolveOnly {
		return d, nil
	}
	budget := float64(p.opts.MemoryBudget)
	if _, peak := p.peakOf(choice); budget > 0 && peak > budget {
		return d, nil
	}
	if budget > 0 {
		lo, _ := p.boundPeak()
		if _, lb := argmax(lo); lb > budget {
			return d, nil // solve would refuse the budget before the certificate
		}
	}
	// As solve answers it (certified): solve reaches certified, whose solveEnergy is
	// this one (deterministic: the same model, schedule and decoding).
	stats := p.baseStats()
	stats.SolveTime = time.Since(start)
	stats.Solver, stats.Sweeps = "msgpass", st.res.iters
	d.Answer = p.planResult(choice, ilp.Optimal, stats)
	return d, nil
}

// baseStats are the ILPStats solve starts from (result.go): the ILP's size and reductions.
func (p *planner) baseStats() ILPStats {
	stats := ILPStats{Values: len(p.g.Values), Variables: p.prob.NumVars(), EdgeVars: p.edgeVars,
		SharedValues: p.shared, PerEdgeValues: p.perEdge, Pruned: p.pruned, Cut: p.cut}
	for gi := range p.groups {
		if p.rep[gi] == gi {
			stats.Nodes++
		} else {
			stats.TiedGroups++
		}
	}
	return stats
}
