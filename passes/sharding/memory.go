package sharding

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"

	"github.com/autopar/autopar/ilp"
	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/mesh"
	"github.com/autopar/autopar/units"
)

// The memory model. Values live from their definition to their last use, in the graph's
// (topological) order; params, state and data inputs from the start; params, state, graph
// outputs and update values to the end (the update replaces its param only once the step
// is done). At point t the values alive are those defined at or before t and last used at
// or after t, so an op's operands and its result are counted together. A device holds
// Strategy.Memory bytes of each under its chosen layout. Peak memory is the maximum over
// points; the budget row of point t bounds the sum at t.
//
// A param or state read in a layout other than its stored one is held in that layout too,
// for the whole step, as codegen holds it: its prologue loads every param and state the
// forward and backward ops read, in each layout they read it in (one copy per distinct
// layout), and keeps every copy until the update's last use of the value. So each
// distinct consumer layout L ≠ stored of value v adds its bytes at every point (v lives
// from 0 to the end). In the ILP, a continuous h(v, L) ∈ [0, 1] holds it: for each
// consumer slot that may read v in L, h ≥ Σ(consumer strategies reading L) − Σ(v's
// strategies storing L), so h is 1 exactly when some chosen consumer reads L and v is not
// stored in L (h has no cost, and the memory rows only push it down). A layout that only
// update ops read is made at the op, not in the prologue; it is counted from 0 all the
// same, an overcount of the forward and backward points by that copy (the update ops read
// params and state in their stored layouts unless the plan pays a resharding for it).

// Recompute describes, per value of the graph, a stage that recomputes its activations
// (codegen's Stage.Recompute): the forward ops its backward runs again, by segment. The
// memory model then follows codegen's order: its points are the graph's ops and, before
// the first backward op that reads a recomputed value of a segment, the recomputation of
// that whole segment (its recomputed ops again, in graph order). A recomputed value lives
// in the forward until its last use there, and again from its recomputation to its last
// use by a backward op or a recomputed one; every other value a recomputed op reads (a
// checkpoint, a stage input, a constant codegen fills again) lives until that read at
// least. So the peak is the recomputing stage's for one micro-batch: what it keeps from
// the forward for the backward, and one segment's activations at a time.
type Recompute struct {
	Redo     []bool // a forward op the backward recomputes
	Backward []bool // an op of the backward (or the update): it reads recomputed copies
	Segment  []int  // the segment of each recomputed op
}

// check refuses marks that do not fit g.
func (rc *Recompute) check(g *ir.Graph) error {
	if rc == nil {
		return nil
	}
	n := len(g.Values)
	if len(rc.Redo) != n || len(rc.Backward) != n || len(rc.Segment) != n {
		return fmt.Errorf("sharding: recomputation marks for %d, %d and %d values of the %d of %s",
			len(rc.Redo), len(rc.Backward), len(rc.Segment), n, g.Name)
	}
	for id := range n {
		if rc.Redo[id] && (rc.Backward[id] || g.Values[id].Op.IsLeaf()) {
			return fmt.Errorf("sharding: %s of %s is marked recomputed but is a backward op or a leaf", g.Values[id].Name, g.Name)
		}
	}
	return nil
}

// liveRanges are the values' live ranges over the memory model's points: each value's
// [first, last] and, for a recomputed value, [again, lastAgain] (again −1: none).
type liveRanges struct {
	first, last, again, lastAgain []int
	points                        int
}

// liveness returns the live ranges of g's values, recomputing as rc says (nil: not
// recomputing, and the points are the values).
func liveness(g *ir.Graph, rc *Recompute) liveRanges {
	n := len(g.Values)
	lr := liveRanges{first: make([]int, n), last: make([]int, n), again: make([]int, n), lastAgain: make([]int, n)}
	// pos: each op's point; redo: a recomputed op's point in its recomputation (−1: none).
	pos, redo := make([]int, n), make([]int, n)
	done := map[int]bool{}
	for id := range n {
		redo[id] = -1
		if rc != nil && rc.Backward[id] {
			for _, a := range g.Values[id].Args {
				if s := rc.Segment[a]; rc.Redo[a] && !done[s] {
					done[s] = true
					for u := range id {
						if rc.Redo[u] && rc.Segment[u] == s {
							redo[u] = lr.points
							lr.points++
						}
					}
				}
			}
		}
		pos[id] = lr.points
		lr.points++
	}
	end := lr.points - 1
	// A recomputed value's last read in the forward, and in a recomputation or the backward;
	// its first read in a recomputation.
	lastF, lastB, firstR := make([]int, n), make([]int, n), make([]int, n)
	for id := range n {
		lr.first[id], lr.last[id], lr.again[id], lr.lastAgain[id] = pos[id], pos[id], -1, -1
		lastF[id], lastB[id], firstR[id] = pos[id], redo[id], lr.points
		if g.Values[id].Op.IsLeaf() {
			lr.first[id] = 0
		}
		if op := g.Values[id].Op; op == ir.OpParam || op == ir.OpState {
			lr.last[id] = end
		}
		for _, a := range g.Values[id].Args {
			lr.last[a] = max(lr.last[a], pos[id], redo[id])
			if rc != nil && rc.Backward[id] {
				lastB[a] = max(lastB[a], pos[id])
			} else {
				lastF[a] = max(lastF[a], pos[id])
			}
			if redo[id] >= 0 {
				lastB[a], firstR[a] = max(lastB[a], redo[id]), min(firstR[a], redo[id])
			}
		}
	}
	for _, o := range g.Outputs {
		lr.last[o.Value], lastF[o.Value] = end, end
	}
	for _, u := range g.Updates {
		lr.last[u.Value], lastF[u.Value] = end, end
	}
	for id := range n {
		if redo[id] < 0 {
			continue // not recomputed (or no backward op needs its segment): one range
		}
		lr.last[id], lr.again[id], lr.lastAgain[id] = lastF[id], redo[id], lastB[id]
		// Overlapping ranges are one; so are they when another segment's recomputation
		// reads the value before its own (codegen keeps such a value instead).
		if lr.again[id] <= lr.last[id]+1 || firstR[id] < redo[id] {
			lr.last[id], lr.again[id], lr.lastAgain[id] = max(lr.last[id], lr.lastAgain[id]), -1, -1
		}
	}
	return lr
}

// sweep returns the memory at every point when value v holds bytes(v).
func (p *planner) sweep(bytes func(ir.ValueID) float64) []float64 {
	return p.live.sweep(bytes)
}

func (lr *liveRanges) sweep(bytes func(ir.ValueID) float64) []float64 {
	diff := make([]float64, lr.points+1)
	for id := range lr.first {
		b := bytes(ir.ValueID(id))
		diff[lr.first[id]] += b
		diff[lr.last[id]+1] -= b
		if lr.again[id] >= 0 {
			diff[lr.again[id]] += b
			diff[lr.lastAgain[id]+1] -= b
		}
	}
	out := make([]float64, lr.points)
	cur := 0.0
	for t := range out {
		cur += diff[t]
		out[t] = cur
	}
	return out
}

// alive reports whether value id is alive at point t.
func (lr *liveRanges) alive(id, t int) bool {
	return lr.first[id] <= t && t <= lr.last[id] || lr.again[id] >= 0 && lr.again[id] <= t && t <= lr.lastAgain[id]
}

// PeakWith is the peak per-device memory of r's plan of g, gathered copies included, when
// the stage recomputes as rc says (nil: it does not). With the Options.Recompute r was
// solved under, it is r.PeakMemory.
func (r *Result) PeakWith(g *ir.Graph, rc *Recompute) (int64, error) {
	if len(r.Strategies) != len(g.Values) {
		return 0, fmt.Errorf("sharding: a result of %d values for %s of %d", len(r.Strategies), g.Name, len(g.Values))
	}
	if err := rc.check(g); err != nil {
		return 0, err
	}
	lr := liveness(g, rc)
	_, peak := argmax(lr.sweep(func(v ir.ValueID) float64 { return float64(r.Strategies[v].Memory) }))
	return int64(peak) + r.Gathered, nil
}

func argmax(xs []float64) (int, float64) {
	best := 0
	for i, x := range xs {
		if x > xs[best] {
			best = i
		}
	}
	if len(xs) == 0 {
		return -1, 0
	}
	return best, xs[best]
}

// peakOf returns the peak memory and its point under a choice of group strategies,
// gathered copies included.
func (p *planner) peakOf(choice []int) (int, float64) {
	t, peak := argmax(p.sweep(func(v ir.ValueID) float64 {
		return float64(p.cands[v][p.pick(v, choice[p.groupOf[v]])].Memory)
	}))
	return t, peak + p.gatheredBytes(choice)
}

// gathered is one layout a param or state may be read in, besides its stored one.
type gathered struct {
	v       ir.ValueID
	key     uint64 // specBits of the layout
	bytes   float64
	readers []reader // the consumer slots with a strategy that reads v in it
}

// reader is one operand slot of a consumer.
type reader struct {
	u    ir.ValueID
	slot int
}

// gatheredLayouts returns, in value order, every (param or state, layout) pair some
// candidate consumer strategy reads and some strategy of the value does not store.
func (p *planner) gatheredLayouts() []gathered {
	if p.gathDone {
		return p.gath
	}
	p.gathDone = true
	idx := map[[2]uint64]int{}
	for id := range p.g.Values {
		u := ir.ValueID(id)
		ks := p.s[p.rep[p.groupOf[u]]]
		for slot, a := range p.g.Values[id].Args {
			if op := p.g.Value(a).Op; op != ir.OpParam && op != ir.OpState {
				continue
			}
			t := p.g.Value(a).Type
			for k := range ks {
				in := p.cands[u][p.pick(u, k)].In
				if slot >= len(in) || p.storedOnlyIn(a, in[slot]) {
					continue
				}
				key := specBits(in[slot])
				i, ok := idx[[2]uint64{uint64(a), key}]
				if !ok {
					b, err := p.lm.LocalBytes(t.Shape, t.DType.Size(), in[slot])
					if err != nil {
						panic(fmt.Sprintf("sharding: %s read as %s: %v", p.g.Value(a).Name, in[slot], err))
					}
					i = len(p.gath)
					idx[[2]uint64{uint64(a), key}] = i
					p.gath = append(p.gath, gathered{v: a, key: key, bytes: float64(b)})
				}
				gl := &p.gath[i]
				if n := len(gl.readers); n == 0 || gl.readers[n-1] != (reader{u, slot}) {
					gl.readers = append(gl.readers, reader{u, slot})
				}
			}
		}
	}
	// Sorted by value, then first reading: deterministic, and each value's layouts together.
	sort.SliceStable(p.gath, func(i, j int) bool { return p.gath[i].v < p.gath[j].v })
	return p.gath
}

// storedOnlyIn reports whether every strategy of v stores it in layout s: reading s then
// never needs a copy.
func (p *planner) storedOnlyIn(v ir.ValueID, s mesh.Spec) bool {
	key := specBits(s)
	for k := range p.s[p.rep[p.groupOf[v]]] {
		if specBits(p.cands[v][p.pick(v, k)].Out) != key {
			return false
		}
	}
	return true
}

// holds reports whether a choice holds gathered layout gl: v is not stored in it and a
// chosen consumer strategy reads v in it.
func (p *planner) holds(gl *gathered, choice []int) bool {
	if specBits(p.cands[gl.v][p.pick(gl.v, choice[p.groupOf[gl.v]])].Out) == gl.key {
		return false
	}
	for _, r := range gl.readers {
		in := p.cands[r.u][p.pick(r.u, choice[p.groupOf[r.u]])].In
		if r.slot < len(in) && specBits(in[r.slot]) == gl.key {
			return true
		}
	}
	return false
}

// gatheredBytes is what a choice holds per device in gathered layouts.
func (p *planner) gatheredBytes(choice []int) float64 {
	sum := 0.0
	for i := range p.gatheredLayouts() {
		if gl := &p.gath[i]; p.holds(gl, choice) {
			sum += gl.bytes
		}
	}
	return sum
}

// addHolds adds to q, whose node variables are p's, a holding variable per gathered
// layout and its rows (see the model above), and returns the variables.
func (p *planner) addHolds(q *ilp.Problem) []ilp.VarID {
	gls := p.gatheredLayouts()
	hs := make([]ilp.VarID, len(gls))
	for i := range gls {
		gl := &gls[i]
		name := p.g.Value(gl.v).Name
		hs[i] = q.AddContinuous(fmt.Sprintf("h.%s.%d", name, i), 0, 1)
		stored := map[ilp.VarID]float64{}
		for k, sv := range p.s[p.rep[p.groupOf[gl.v]]] {
			if specBits(p.cands[gl.v][p.pick(gl.v, k)].Out) == gl.key {
				stored[sv]++
			}
		}
		for ri, r := range gl.readers {
			coef := map[ilp.VarID]float64{hs[i]: 1}
			for v, c := range stored {
				coef[v] += c
			}
			for k, sv := range p.s[p.rep[p.groupOf[r.u]]] {
				if in := p.cands[r.u][p.pick(r.u, k)].In; r.slot < len(in) && specBits(in[r.slot]) == gl.key {
					coef[sv]--
				}
			}
			q.AddRow(fmt.Sprintf("hold.%s.%d.%d", name, i, ri), sortedTerms(coef), ilp.GE, 0)
		}
	}
	return hs
}

func sortedTerms(coef map[ilp.VarID]float64) []ilp.Term {
	terms := make([]ilp.Term, 0, len(coef))
	for v, c := range coef {
		if c != 0 {
			terms = append(terms, ilp.Term{Var: v, Coef: c})
		}
	}
	sort.Slice(terms, func(i, j int) bool { return terms[i].Var < terms[j].Var })
	return terms
}

// boundPeak returns, per point, the memory with every value at its smallest (lo) and
// largest (hi) candidate layout. max(lo) is a lower bound on any plan's peak.
func (p *planner) boundPeak() (lo, hi []float64) {
	pickBytes := func(better func(a, b int64) bool) func(ir.ValueID) float64 {
		return func(v ir.ValueID) float64 {
			b := p.cands[v][0].Memory
			for _, s := range p.cands[v] {
				if better(s.Memory, b) {
					b = s.Memory
				}
			}
			return float64(b)
		}
	}
	lo = p.sweep(pickBytes(func(a, b int64) bool { return a < b }))
	hi = p.sweep(pickBytes(func(a, b int64) bool { return a > b }))
	return lo, hi
}

// memoryTerms returns Σ over values alive at t of Σ_k s_k·bytes(v, k), merged per variable
// (tied groups share variables), plus Σ h·bytes over the gathered layouts (hs, as addHolds
// made them: alive at every point), sorted by variable.
func (p *planner) memoryTerms(t int, hs []ilp.VarID) []ilp.Term {
	coef := map[ilp.VarID]float64{}
	for id := range p.g.Values {
		if !p.live.alive(id, t) {
			continue
		}
		v := ir.ValueID(id)
		gi := p.groupOf[v]
		for k, sv := range p.s[p.rep[gi]] {
			if b := p.cands[v][p.pick(v, k)].Memory; b != 0 {
				coef[sv] += float64(b)
			}
		}
	}
	for i, h := range hs {
		coef[h] += p.gath[i].bytes
	}
	return sortedTerms(coef)
}

// topPoints returns up to k points with the largest values among those where a value dies
// next (the only points that can be maximal), largest first.
func (p *planner) topPoints(vals []float64, k int, above float64) []int {
	n := len(vals)
	dies := make([]bool, n)
	dies[n-1] = true
	for id := range p.live.last {
		dies[p.live.last[id]] = true
		if p.live.again[id] >= 0 {
			dies[p.live.lastAgain[id]] = true
		}
	}
	var pts []int
	for t := range n {
		if dies[t] && vals[t] > above {
			pts = append(pts, t)
		}
	}
	sort.SliceStable(pts, func(i, j int) bool { return vals[pts[i]] > vals[pts[j]] })
	if len(pts) > k {
		pts = pts[:k]
	}
	return pts
}

// minPeak finds the smallest peak memory any choice of strategies reaches, by a min-peak
// ILP over the node variables alone (edges do not affect memory), adding the point rows
// lazily: each round adds the point where the round's plan peaks, until the plan's peak
// equals the model's bound. It returns that plan's choice and its peak, computed from the
// choice (peakOf), not read from the ILP's continuous peak variable (which lp_solve may
// return a few ulps below the row's sum, see TestMinPeakRowIsFeasibleAtItsScale in ilp).
// exact is false when the solver stopped early; the answer is then the best plan's peak,
// an upper bound on the minimum.
func (p *planner) minPeak(ctx context.Context) (mp minPeakPlan, exact bool, err error) {
	q := &ilp.Problem{Vars: append([]ilp.Var(nil), p.prob.Vars[:p.numS]...),
		Rows: append([]ilp.Row(nil), p.prob.Rows[:p.numOneHot]...)}
	m := q.AddContinuous("peak", 0, math.Inf(1))
	q.SetObjective([]ilp.Term{{Var: m, Coef: 1}}, 0)
	hs := p.addHolds(q)
	lo, _ := p.boundPeak()
	pts := p.topPoints(lo, 4, -1)
	for round := 0; ; round++ {
		for _, t := range pts {
			terms := append([]ilp.Term{{Var: m, Coef: 1}}, negate(p.memoryTerms(t, hs))...)
			q.AddRow("peak.t"+strconv.Itoa(t), terms, ilp.GE, 0)
		}
		sol, err := ilp.Solve(ctx, q, p.opts.ilpOptions())
		if sol == nil {
			return minPeakPlan{}, false, err
		}
		choice := p.choiceFrom(sol.Values)
		t, got := p.peakOf(choice)
		if err != nil || got <= sol.Values[m]*(1+1e-9)+1e-6 || round > 50 {
			return minPeakPlan{choice: choice, peak: got, rounds: round + 1, status: sol.Status.String()},
				err == nil && round <= 50, nil
		}
		pts = []int{t}
	}
}

// minPeakPlan is the plan minPeak found: its choice of group strategies, its peak (with
// the gathered copies), the min-peak ILP's rounds and the last round's status.
type minPeakPlan struct {
	choice []int
	peak   float64
	rounds int
	status string
}

func negate(ts []ilp.Term) []ilp.Term {
	for i := range ts {
		ts[i].Coef = -ts[i].Coef
	}
	return ts
}

// MemoryError says that no plan fits the memory budget. Minimum is the smallest peak
// per-device memory of any plan the pass can express (Exact) or a lower bound on it.
//
// Plan, when Exact, is a plan of that least footprint: the min-peak ILP's choice, spelt out
// and priced as Solve spells out and prices the choice of its own ILP (Cost, Collectives,
// PeakMemory = Minimum, Gathered), with Budget = Minimum and ILP describing the min-peak
// solve (Status, Rounds) and the plan ILP's objective of the choice (Objective). It is a
// real plan, not the fastest of that footprint: the min-peak ILP does not price time. nil
// when the minimum is only a bound.
type MemoryError struct {
	Budget  int64
	Minimum int64
	Exact   bool
	How     string
	Plan    *Result
}

func (e *MemoryError) Error() string {
	q := "at least"
	if e.Exact {
		q = "exactly"
	}
	return fmt.Sprintf("sharding: memory budget %s per device is too small: the smallest footprint of any plan is %s %s (%d bytes; %s)",
		units.Bytes(e.Budget), q, units.Bytes(e.Minimum), e.Minimum, e.How)
}

// infeasibleMemory builds the error for a budget no plan meets, naming the minimum and,
// when the min-peak ILP solved it exactly, carrying the plan of that minimum.
func (p *planner) infeasibleMemory(ctx context.Context) error {
	lo, _ := p.boundPeak()
	_, lb := argmax(lo)
	mp, exact, err := p.minPeak(ctx)
	if err != nil || !exact {
		how := "lower bound: every live value at its smallest layout at the worst point"
		if err != nil && !errors.Is(err, ilp.ErrTimeout) {
			how += "; the min-peak ILP failed: " + err.Error()
		}
		return &MemoryError{Budget: p.opts.MemoryBudget, Minimum: int64(math.Ceil(lb)), How: how}
	}
	minimum := int64(math.Ceil(mp.peak))
	return &MemoryError{Budget: p.opts.MemoryBudget, Minimum: minimum, Exact: true,
		How: "solved exactly by a min-peak ILP over the same strategies", Plan: p.minPeakResult(mp, minimum)}
}

// minPeakResult spells out the min-peak plan as solve spells out its own: the same
// Result, priced by result from the choice, its ILP objective that of the plan ILP (p.prob,
// the objective minimised under a budget) at the choice's assignment.
func (p *planner) minPeakResult(mp minPeakPlan, minimum int64) *Result {
	stats := ILPStats{Values: len(p.g.Values), Variables: p.prob.NumVars(), Rows: p.prob.NumRows(), EdgeVars: p.edgeVars,
		SharedValues: p.shared, PerEdgeValues: p.perEdge, Pruned: p.pruned, Cut: p.cut, Rounds: mp.rounds,
		Status: "min-peak " + mp.status}
	for gi := range p.groups {
		if p.rep[gi] == gi {
			stats.Nodes++
		} else {
			stats.TiedGroups++
		}
	}
	x := p.assignment(mp.choice)
	stats.Objective = p.prob.ObjConstant
	for _, t := range p.prob.Objective {
		stats.Objective += t.Coef * x[t.Var]
	}
	r := p.result(mp.choice, stats)
	r.Budget = minimum
	r.PeakMemory = minimum
	r.Gathered = int64(p.gatheredBytes(mp.choice))
	return r
}

// FormatBytes is [units.Bytes], kept for callers outside autopar; autopar prints through
// units.
func FormatBytes(b int64) string { return units.Bytes(b) }
