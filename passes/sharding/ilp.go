package sharding

import (
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/autopar/autopar/ilp"
	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/mesh"
)

// planner holds one run of the pass: the candidates, the groups and the ILP built on them.
type planner struct {
	// ctx, when set, stops buildILP early once it ends (newPlannerContext then reports
	// ctx's error): pricing the edges of a large stage takes seconds.
	ctx  context.Context
	g    *ir.Graph
	lm   *mesh.LogicalMesh
	opts Options
	cm   costModel
	fu   *fusion // the kernels the candidates were priced with (nil: no fusion)

	cands     [][]Strategy // per value
	candEnt   *candEntry   // the CandidateMemo entry cands came from (nil: none)
	groups    []*group
	groupOf   []int // per value
	memberIdx []int // per value: index in its group's members
	rep       []int // per group: the group whose variables it shares (itself unless tied)

	memo map[localReshardKey]mesh.Reshard
	// typeID numbers each value's type (0: not yet), typeIDs the numbers of the types'
	// texts and typeKeys the texts, by number − 1.
	typeID   []int32
	typeIDs  map[string]int32
	typeKeys []string

	// wB weighs the per-micro-batch costs and wReshard, per value, its reshardings in the
	// objective (weights.go); all 1 for an unweighted solve.
	wB       float64
	wReshard []float64

	// The ILP.
	prob      *ilp.Problem
	s         [][]ilp.VarID // per group (reps only): one binary per strategy
	nodeCost  [][]float64   // per rep group, per strategy: own cost + folded edge costs
	edgeVars  int
	numS      int // the node variables come first, VarIDs 0..numS-1
	numOneHot int // and their one-hot rows, RowIDs 0..numOneHot-1

	live liveRanges // per value: its live ranges (memory.go)
	// gath are the layouts params and state may be read in besides their stored one
	// (memory.go, gatheredLayouts); gathDone says they are computed; hMain are their
	// holding variables in prob, once the memory rows need them.
	gath     []gathered
	gathDone bool
	hMain    []ilp.VarID

	// inside lists per value its reads by members of its own group (findInside): the
	// group prices them (priceInside), and an edge out of the group wanting a layout one of
	// them wants costs nothing (made).
	inside [][]insideRead

	edgeRecs   []edgeRec
	sharedRecs []sharedRec
	// shared and perEdge count the values priced once per layout by addShared and those
	// left per edge for their size (maxSharedCells).
	shared, perEdge int
	// leavesPriced counts the inputs, constants and iotas of two or more edges the ILP
	// prices once per consumer (sharedValues) that cannot be laid out replicated at their
	// least own cost (replicatedFree): only where it is 0 is the ILP's optimum without
	// memory rows at most every plan's Result.Cost (FreeDual.LeafValues).
	leavesPriced int
	// pruned counts the strategies pruneDominated dropped.
	pruned int
	// cut counts the strategies cutEinsums dropped.
	cut int
	// merged counts the edge cells mergeEqual saved.
	merged int
}

// sharedRec remembers one row of a shared value (see addShared): y ≥ z, or, with z −1,
// y ≥ the binaries of consumer group m's strategies in column class c.
type sharedRec struct {
	y, z  ilp.VarID
	m, c  int
	colOf []int
	v     ir.ValueID // the shared value
}

// edgeRec remembers one group pair's edge variables, to write assignments (assignment).
type edgeRec struct {
	a, m         int
	rowOf, colOf []int
	vars         [][]ilp.VarID
}

type reshardKey struct {
	typ      string // the value's type, e.g. "f16[16,1024,2048]"
	from, to uint64 // specKeys
}

// specBits packs a spec into an integer: two bits per dim and two for the partial axes.
// Ranks above 31 do not occur in the IR's ops; they panic.
func specBits(s mesh.Spec) uint64 {
	if len(s.Dims) > 31 {
		panic("sharding: rank above 31")
	}
	k := uint64(s.Partial) | uint64(len(s.Dims))<<2
	for i, d := range s.Dims {
		k |= uint64(d) << (7 + 2*i)
	}
	return k
}

// reshard prices turning value v from one layout into another, memoized per (type, from,
// to): a GPT step prices the same few pairs thousands of times. The planner's own memo
// keys a type by its number in typeIDs; the shared one (Options.Reshard) by its text.
func (p *planner) reshard(v ir.ValueID, from, to mesh.Spec) mesh.Reshard {
	t := p.g.Value(v).Type
	if p.typeID[v] == 0 {
		key := t.String()
		id, ok := p.typeIDs[key]
		if !ok {
			id = int32(len(p.typeIDs) + 1)
			p.typeIDs[key] = id
			p.typeKeys = append(p.typeKeys, key)
		}
		p.typeID[v] = id
	}
	lk := localReshardKey{p.typeID[v], specBits(from), specBits(to)}
	if r, ok := p.memo[lk]; ok {
		return r
	}
	k := reshardKey{p.typeKeys[lk.typ-1], lk.from, lk.to}
	if r, ok := p.opts.Reshard.get(k); ok {
		p.memo[lk] = r
		return r
	}
	r, err := p.opts.Reshard.price(p.lm, t.Shape, t.DType.Size(), k, from, to)
	if err != nil {
		panic(fmt.Sprintf("sharding: resharding %s from %s to %s: %v", p.g.Value(v).Name, from, to, err))
	}
	p.memo[lk] = r
	p.opts.Reshard.put(k, r)
	return r
}

// localReshardKey is reshardKey with the type numbered by the planner (typeIDs).
type localReshardKey struct {
	typ      int32
	from, to uint64
}

// ReshardMemo holds resharding prices on one logical mesh shape, shared by the solves on
// it (see Options.Reshard). The zero value is ready; a nil *ReshardMemo holds nothing.
type ReshardMemo struct {
	mu sync.Mutex
	m  map[reshardKey]mesh.Reshard
	// srcs holds per (type, from) the search that priced a first target from there: a
	// value's layouts are read in ten or so others, all answered by the one search.
	srcs map[srcKey]*mesh.ReshardSource
	// tensors holds per type the layout graph with its moves listed, which the searches
	// from its layouts share (listing them was most of a search).
	tensors map[string]*mesh.ReshardTensor
}

type srcKey struct {
	typ  string
	from uint64
}

// price is mesh.ReshardCost(lm, shape, elemBytes, from, to), k's key, read off the memo's
// search from (k.typ, from) (mesh.ReshardSource: the same answer), made on the first
// target asked of it over the moves of k.typ's layouts (mesh.ReshardTensor, listed on its
// first source). A nil memo searches every time.
func (r *ReshardMemo) price(lm *mesh.LogicalMesh, shape []int, elemBytes int, k reshardKey, from, to mesh.Spec) (mesh.Reshard, error) {
	if r == nil {
		return mesh.ReshardCost(lm, shape, elemBytes, from, to)
	}
	sk := srcKey{k.typ, k.from}
	r.mu.Lock()
	src := r.srcs[sk]
	r.mu.Unlock()
	if src == nil {
		r.mu.Lock()
		t := r.tensors[k.typ]
		r.mu.Unlock()
		if t == nil {
			var err error
			if t, err = mesh.NewReshardTensor(lm, shape, elemBytes); err != nil {
				return mesh.Reshard{}, err
			}
			r.mu.Lock()
			if had := r.tensors[k.typ]; had != nil {
				t = had // a concurrent solve got there first: keep one
			} else {
				if r.tensors == nil {
					r.tensors = map[string]*mesh.ReshardTensor{}
				}
				r.tensors[k.typ] = t
			}
			r.mu.Unlock()
		}
		var err error
		if src, err = t.Source(from); err != nil {
			return mesh.Reshard{}, err
		}
		r.mu.Lock()
		if had := r.srcs[sk]; had != nil {
			src = had // a concurrent solve got there first: keep one
		} else {
			if r.srcs == nil {
				r.srcs = map[srcKey]*mesh.ReshardSource{}
			}
			r.srcs[sk] = src
		}
		r.mu.Unlock()
	}
	return src.To(to)
}

func (r *ReshardMemo) get(k reshardKey) (mesh.Reshard, bool) {
	if r == nil {
		return mesh.Reshard{}, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	x, ok := r.m[k]
	return x, ok
}

func (r *ReshardMemo) put(k reshardKey, x mesh.Reshard) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[reshardKey]mesh.Reshard{}
	}
	r.m[k] = x
}

// outSpec is value v's layout under strategy k of its group.
func (p *planner) outSpec(v ir.ValueID, k int) mesh.Spec {
	return p.cands[v][p.pick(v, k)].Out
}

func (p *planner) pick(v ir.ValueID, k int) int32 {
	return p.groups[p.groupOf[v]].strats[k].pick[p.memberIdx[v]]
}

// edge is one use of a value across groups: operand slot of consumer to, or (slot -1) the
// update of param/state to by value from, which must end in to's layout.
type edge struct {
	from, to ir.ValueID
	slot     int
}

func (p *planner) edges() []edge {
	p.findInside()
	var out []edge
	for id := range p.g.Values {
		to := ir.ValueID(id)
		for i, a := range p.g.Values[id].Args {
			if p.groupOf[a] != p.groupOf[to] {
				out = append(out, edge{a, to, i})
			}
		}
	}
	for _, u := range p.g.Updates {
		if p.groupOf[u.Value] != p.groupOf[u.Target] { // else priced by the group (priceInside)
			out = append(out, edge{u.Value, u.Target, -1})
		}
	}
	return out
}

// made reports whether a read of v inside its group wants layout want under strategy k
// of the group, which then makes v in that layout: an edge out of the group wanting it
// reads that copy (Result prices each (value, layout) once).
func (p *planner) made(v ir.ValueID, k int, want mesh.Spec) bool {
	if len(p.inside[v]) == 0 {
		return false
	}
	gr := p.groups[p.groupOf[v]]
	b := specBits(want)
	for _, r := range p.inside[v] {
		if specBits(p.wantIn(gr, &gr.strats[k], r)) == b {
			return true
		}
	}
	return false
}

// madeBits appends to buf the layouts v is resharded into inside its group under
// strategy k (made, those of a resharding that moves something), sorted, each once: with
// v's own layout they decide what every edge out of the group costs.
func (p *planner) madeBits(v ir.ValueID, k int, buf []uint64) []uint64 {
	gr := p.groups[p.groupOf[v]]
	out := p.outSpec(v, k)
	ob := specBits(out)
	for _, r := range p.inside[v] {
		w := p.wantIn(gr, &gr.strats[k], r)
		if b := specBits(w); b != ob && !slices.Contains(buf, b) && p.reshard(v, out, w).Time > 0 {
			buf = append(buf, b)
		}
	}
	slices.Sort(buf)
	return buf
}

// appendMade appends to key the layouts v's group makes of it inside under strategy k
// (madeBits: their count, then each), nothing where the group reshards v nowhere inside;
// scratch is madeBits' buffer, kept between calls.
func (p *planner) appendMade(key []byte, v ir.ValueID, k int, scratch *[]uint64) []byte {
	if len(p.inside[v]) == 0 {
		return key
	}
	*scratch = p.madeBits(v, k, (*scratch)[:0])
	key = binary.LittleEndian.AppendUint64(key, uint64(len(*scratch)))
	for _, b := range *scratch {
		key = binary.LittleEndian.AppendUint64(key, b)
	}
	return key
}

// edgeCost is an edge out of v's group wanting layout want, under strategy k of the
// group, weighed: nothing where the group makes v in that layout already (made), else
// the resharding from v's layout.
func (p *planner) edgeCost(v ir.ValueID, k int, want mesh.Spec) float64 {
	if p.made(v, k, want) {
		return 0
	}
	return p.reshardCost(v, p.outSpec(v, k), want)
}

// producerClasses is classes over the layouts of the edges' values under group g's
// strategies, and, for a value its group reshards inside, the layouts it makes there
// (madeBits): what the edges cost on the producer's side.
func (p *planner) producerClasses(g int, es []edge) ([]int, []int) {
	inside := false
	for _, e := range es {
		inside = inside || len(p.inside[e.from]) > 0
	}
	if !inside {
		return p.classes(g, es, func(e edge, k int) mesh.Spec { return p.outSpec(e.from, k) })
	}
	var bits []uint64
	return classesByKey(len(p.groups[g].strats), func(k int, buf []byte) []byte {
		for _, e := range es {
			buf = binary.LittleEndian.AppendUint64(buf, specBits(p.outSpec(e.from, k)))
			buf = p.appendMade(buf, e.from, k, &bits)
		}
		return buf
	})
}

// want is the layout edge e's consumer needs under strategy k of its group.
func (p *planner) want(e edge, k int) mesh.Spec {
	if e.slot < 0 {
		return p.outSpec(e.to, k)
	}
	return p.cands[e.to][p.pick(e.to, k)].In[e.slot]
}

// buildILP writes the problem: one-hot binaries per representative group, and for every
// pair of groups joined by edges, continuous edge variables over the distinct classes of
// their strategies. A class is the tuple of layouts the pair's edges see, so the edge
// cost is a function of the two classes; one-hot node variables force the transport
// polytope's only feasible point onto the right cell, so the relaxation is exact. A pair
// whose cost depends on one side only is folded into that side's node cost.
func (p *planner) buildILP() {
	p.prob = &ilp.Problem{}
	p.s = make([][]ilp.VarID, len(p.groups))
	p.nodeCost = make([][]float64, len(p.groups))
	for gi, gr := range p.groups {
		r := p.rep[gi]
		if p.nodeCost[r] == nil {
			p.nodeCost[r] = make([]float64, len(gr.strats))
		}
		for k, gs := range gr.strats {
			p.nodeCost[r][k] += gs.cost()
		}
	}
	shared := p.sharedValues()
	var todo []pairCost
	for i, es := range p.pairs(shared) {
		if i%8 == 0 && p.ctx != nil && p.ctx.Err() != nil {
			return
		}
		if pc, ok := p.pairCost(es); ok {
			todo = append(todo, pc)
		}
	}
	var obj []ilp.Term
	for gi := range p.groups {
		if p.rep[gi] != gi {
			continue
		}
		name := p.g.Value(p.groups[gi].members[0]).Name
		var one []ilp.Term
		for k, c := range p.nodeCost[gi] {
			v := p.prob.AddBinary("s." + name + "." + strconv.Itoa(k))
			p.s[gi] = append(p.s[gi], v)
			one = append(one, ilp.Term{Var: v, Coef: 1})
			if c != 0 {
				obj = append(obj, ilp.Term{Var: v, Coef: c})
			}
		}
		p.prob.AddRow("onehot."+name, one, ilp.EQ, 1)
	}
	p.numS, p.numOneHot = p.prob.NumVars(), p.prob.NumRows()
	cells := 0
	for _, t := range todo {
		cells += len(t.cost) * len(t.cost[0])
	}
	p.prob.Vars = slices.Grow(p.prob.Vars, cells)
	obj = slices.Grow(obj, cells)
	for _, t := range todo {
		obj = append(obj, p.addEdge(t.a, t.m, t.rowOf, t.colOf, t.cost)...)
	}
	p.shared = len(shared.order)
	for _, v := range shared.order {
		if p.ctx != nil && p.ctx.Err() != nil {
			return
		}
		for _, t := range p.addShared(v, shared.edges[v]) {
			t.Coef *= float64(shared.copies[v])
			obj = append(obj, t)
		}
	}
	p.prob.SetObjective(coalesce(obj, p.prob.NumVars()), 0)
}

// coalesce sums the terms of each variable (of n) into one, in order of first appearance.
func coalesce(terms []ilp.Term, n int) []ilp.Term {
	at := make([]int32, n) // per variable: 1 + its index in out, 0: none yet
	out := make([]ilp.Term, 0, len(terms))
	for _, t := range terms {
		if i := at[t.Var]; i > 0 {
			out[i-1].Coef += t.Coef
			continue
		}
		out = append(out, t)
		at[t.Var] = int32(len(out))
	}
	return out
}

// sharedEdges are the edges of the values whose consumers may share a resharding: a value
// resharded into one layout is resharded once, whatever number of consumers read that
// layout (codegen keeps every layout it made of a value), so its price is one resharding
// per distinct layout its consumers want, not one per edge.
//
// Values of identical layers (tied groups: the same member of the same representative,
// read by the same members of the same representatives) choose alike, so they are priced
// once, their costs times their count (copies).
type sharedEdges struct {
	order  []ir.ValueID
	edges  map[ir.ValueID][]edge // every shared value's, copies included (pairs skips them)
	copies map[ir.ValueID]int    // per value of order: it and its copies
}

// sharedValues picks the values priced by addShared: those with two or more edges that do
// not all join the same pair of distinct representative groups (that case the pair's own
// cost matrix prices once per layout, see pairCost).
func (p *planner) sharedValues() sharedEdges {
	byValue := map[ir.ValueID][]edge{}
	var order []ir.ValueID
	for _, e := range p.edges() {
		if _, ok := byValue[e.from]; !ok {
			order = append(order, e.from)
		}
		byValue[e.from] = append(byValue[e.from], e)
	}
	out := sharedEdges{edges: map[ir.ValueID][]edge{}, copies: map[ir.ValueID]int{}}
	seen := map[string]ir.ValueID{}
	for _, v := range order {
		es := byValue[v]
		if len(es) < 2 {
			continue
		}
		a := p.rep[p.groupOf[v]]
		one := true
		for _, e := range es {
			m := p.rep[p.groupOf[e.to]]
			one = one && m != a && m == p.rep[p.groupOf[es[0].to]]
		}
		if op := p.g.Value(v).Op; p.opts.sharedCells == 0 && (op == ir.OpInput || op == ir.OpConstant || op == ir.OpIota) {
			// Inputs and constants are loaded or filled in each layout asked for, not
			// resharded: each consumer's layout is its own.
			if !one && !p.replicatedFree(v) {
				p.leavesPriced++
			}
			continue
		}
		if one {
			continue
		}
		if p.sharedCells(v, es) > cmp.Or(p.opts.sharedCells, maxSharedCells) {
			p.perEdge++
			continue
		}
		out.edges[v] = es
		var sig strings.Builder
		fmt.Fprintf(&sig, "%d %d %s %g", a, p.memberIdx[v], p.g.Value(v).Type, p.wReshard[v])
		for _, r := range p.inside[v] {
			fmt.Fprintf(&sig, "/%d %d", p.memberIdx[r.to], r.slot) // what its group makes of it (made)
		}
		for _, e := range es {
			fmt.Fprintf(&sig, "|%d %d %d", p.rep[p.groupOf[e.to]], p.memberIdx[e.to], e.slot)
		}
		if first, ok := seen[sig.String()]; ok {
			out.copies[first]++
			continue
		}
		seen[sig.String()] = v
		out.order = append(out.order, v)
		out.copies[v] = 1
	}
	return out
}

// replicatedFree reports whether leaf v is alone in its group and one of the group's
// strategies lays it out replicated at the group's least own cost. Then any plan with v
// laid out otherwise costs the ILP at least as much as the same plan with v replicated,
// whose resharding of v into any layout is a free slice: so pricing v per consumer
// (sharedValues) leaves the ILP's optimum without memory rows at most every plan's
// once-per-layout cost (docs/DECISIONS.md, "Round ten, rangedual").
func (p *planner) replicatedFree(v ir.ValueID) bool {
	gr := p.groups[p.groupOf[v]]
	if len(gr.members) != 1 || len(gr.strats) == 0 {
		return false
	}
	least, free := math.Inf(1), math.Inf(1)
	for k, gs := range gr.strats {
		least = min(least, gs.obj)
		if p.outSpec(v, k).Used() == mesh.AxesNone {
			free = min(free, gs.obj)
		}
	}
	return free <= least
}

// maxSharedCells bounds the transport cells addShared may add for one value. A value past
// it keeps one resharding per edge in the ILP (an upper bound on its price: consumers
// wanting the same layout pay it twice there), while Result still counts each (value,
// layout) once, as codegen runs it; ILPStats.PerEdgeValues counts them. The bound keeps
// the ILP of a transformer layer on a 2-D mesh near its old size (its attention tensors
// have hundreds of cells per edge), and graphs as small as the brute-force tests' exact.
const maxSharedCells = 256

// sharedCells is the size of v's transport cells in addShared: producer classes by v's
// layout times each edge's consumer classes by the layout it wants.
func (p *planner) sharedCells(v ir.ValueID, es []edge) int {
	a := p.rep[p.groupOf[v]]
	_, rows := p.producerClasses(a, es[:1])
	n := 0
	for _, e := range es {
		_, cols := p.classes(p.rep[p.groupOf[e.to]], []edge{e}, p.want)
		n += len(rows) * len(cols)
	}
	return n
}

// addShared prices the reshardings of shared value v, each (value, layout) once.
//
// A layout L that some edge wants whatever its consumer does (its consumer group has one
// class) is paid by the producer's strategies: reshard(O → L) on every strategy laying v
// out as O. A layout only one edge can want is paid on that edge's cells, as a pair's. For
// a layout L several edges can want, one continuous y ∈ [0, 1] per producer class (layout
// O) costs reshard(O → L), with y ≥ the edge's transport variable of the cell (O, L) for
// every such edge: with one-hot binaries exactly the chosen cells are 1, so y is 1 when
// the producer lays v out as O and some consumer wants L. y ≥ z keeps the relaxation as
// tight as the pairs' (y is the max of cells). Where the producer has one class, the cell
// is the sum of the consumer's binaries wanting L and needs no variable.
func (p *planner) addShared(v ir.ValueID, es []edge) []ilp.Term {
	a := p.rep[p.groupOf[v]]
	rowOf, rows := p.producerClasses(a, es[:1])
	type side struct {
		m           int
		colOf, cols []int
		wants       []string // per column class: the layout's key
		specs       []mesh.Spec
	}
	sides := make([]side, len(es))
	var obj []ilp.Term
	always := map[string]bool{}
	count := map[string]int{}
	for ei, e := range es {
		sd := &sides[ei]
		sd.m = p.rep[p.groupOf[e.to]]
		sd.colOf, sd.cols = p.classes(sd.m, []edge{e}, p.want)
		for _, km := range sd.cols {
			w := p.want(e, km)
			sd.wants, sd.specs = append(sd.wants, w.String()), append(sd.specs, w)
			count[w.String()]++
		}
		if len(sd.cols) == 1 && !always[sd.wants[0]] {
			always[sd.wants[0]] = true
			for k, r := range rowOf {
				if x := p.edgeCost(v, rows[r], sd.specs[0]); x != 0 {
					obj = append(obj, ilp.Term{Var: p.s[a][k], Coef: x})
				}
			}
		}
	}
	name := p.g.Value(v).Name
	ys := map[string]ilp.VarID{} // "row layout" → y
	yOf := func(r int, key string, cost float64) ilp.VarID {
		k := strconv.Itoa(r) + " " + key
		y, ok := ys[k]
		if !ok {
			y = p.prob.AddContinuous(fmt.Sprintf("y.%s.%d.%d", name, r, len(ys)), 0, 1)
			ys[k] = y
			obj = append(obj, ilp.Term{Var: y, Coef: cost})
			p.edgeVars++
		}
		return y
	}
	for ei := range es {
		sd := &sides[ei]
		if len(sd.cols) == 1 {
			continue // paid by the producer
		}
		cost := make([][]float64, len(rows))
		shared := make([][]bool, len(rows))
		anyShared, zero := false, true
		for r, ka := range rows {
			cost[r], shared[r] = make([]float64, len(sd.cols)), make([]bool, len(sd.cols))
			for c := range sd.cols {
				if always[sd.wants[c]] {
					continue
				}
				x := p.edgeCost(v, ka, sd.specs[c])
				if x == 0 {
					continue
				}
				if count[sd.wants[c]] > 1 {
					shared[r][c], anyShared = true, true
				} else {
					cost[r][c], zero = x, false
				}
			}
		}
		switch {
		case !anyShared && zero:
			continue
		case !anyShared || len(rows) == 1:
			// No transport variables: a producer with one class or a cost of one side only
			// folds into the consumer's node cost; shared cells bound y by the consumer's
			// binaries.
			if len(rows) > 1 {
				n := len(cost) * len(cost[0])
				rowOf, colOf, cost := mergeEqual(rowOf, sd.colOf, cost)
				p.merged += n - len(cost)*len(cost[0])
				switch {
				case len(cost) == 1:
					for km, c := range colOf {
						if cost[0][c] != 0 {
							obj = append(obj, ilp.Term{Var: p.s[sd.m][km], Coef: cost[0][c]})
						}
					}
				case len(cost[0]) == 1:
					for ka, r := range rowOf {
						if cost[r][0] != 0 {
							obj = append(obj, ilp.Term{Var: p.s[a][ka], Coef: cost[r][0]})
						}
					}
				default:
					obj = append(obj, p.addEdge(a, sd.m, rowOf, colOf, cost)...)
				}
				continue
			}
			for km, c := range sd.colOf {
				if cost[0][c] != 0 {
					obj = append(obj, ilp.Term{Var: p.s[sd.m][km], Coef: cost[0][c]})
				}
			}
			for c := range sd.cols {
				if !shared[0][c] {
					continue
				}
				y := yOf(0, sd.wants[c], p.edgeCost(v, rows[0], sd.specs[c]))
				terms := []ilp.Term{{Var: y, Coef: 1}}
				for km, cc := range sd.colOf {
					if cc == c {
						terms = append(terms, ilp.Term{Var: p.s[sd.m][km], Coef: -1})
					}
				}
				p.prob.AddRow(fmt.Sprintf("y.%s.e%d.%d", name, ei, c), terms, ilp.GE, 0)
				p.sharedRecs = append(p.sharedRecs, sharedRec{y: y, m: sd.m, colOf: sd.colOf, c: c, z: -1, v: v})
			}
		default:
			obj = append(obj, p.addEdge(a, sd.m, rowOf, sd.colOf, cost)...)
			z := p.edgeRecs[len(p.edgeRecs)-1].vars
			for r, ka := range rows {
				for c := range sd.cols {
					if !shared[r][c] {
						continue
					}
					y := yOf(r, sd.wants[c], p.edgeCost(v, ka, sd.specs[c]))
					p.prob.AddRow(fmt.Sprintf("y.%s.e%d.%d.%d", name, ei, r, c),
						[]ilp.Term{{Var: y, Coef: 1}, {Var: z[r][c], Coef: -1}}, ilp.GE, 0)
					p.sharedRecs = append(p.sharedRecs, sharedRec{y: y, z: z[r][c], v: v})
				}
			}
		}
	}
	return obj
}

// pairs groups the edges by the (producer, consumer) pair of representative groups, in
// order of the pair; an edge within one representative is folded into its node cost. The
// edges of shared values are left to addShared.
func (p *planner) pairs(shared sharedEdges) [][]edge {
	byPair := map[[2]int][]edge{}
	for _, e := range p.edges() {
		if _, ok := shared.edges[e.from]; ok {
			continue // priced by addShared
		}
		a, m := p.rep[p.groupOf[e.from]], p.rep[p.groupOf[e.to]]
		if a == m {
			p.foldDiagonal(a, e)
			continue
		}
		byPair[[2]int{a, m}] = append(byPair[[2]int{a, m}], e)
	}
	keys := make([][2]int, 0, len(byPair))
	for k := range byPair {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		return keys[i][0] < keys[j][0] || keys[i][0] == keys[j][0] && keys[i][1] < keys[j][1]
	})
	out := make([][]edge, len(keys))
	for i, k := range keys {
		out[i] = byPair[k]
	}
	return out
}

// pairCost is the cost matrix of one group pair over its strategy classes.
type pairCost struct {
	a, m         int
	rowOf, colOf []int
	cost         [][]float64
}

// pairCost prices the edges of one pair. It reports false when the pair needs no edge
// variables: every cell is zero, or the cost depends on one side only and has been folded
// into that side's node cost.
func (p *planner) pairCost(es []edge) (pairCost, bool) {
	a, m := p.rep[p.groupOf[es[0].from]], p.rep[p.groupOf[es[0].to]]
	rowOf, rows := p.producerClasses(a, es)
	colOf, cols := p.classes(m, es, p.want)
	cost := make([][]float64, len(rows))
	zero := true
	type once struct {
		v    ir.ValueID
		want uint64
	}
	var seen []once // a value resharded into one layout once, for every edge reading it
	for r, ka := range rows {
		cost[r] = make([]float64, len(cols))
		for c, km := range cols {
			seen = seen[:0]
			for _, e := range es {
				want := p.want(e, km)
				if k := (once{e.from, specBits(want)}); !slices.Contains(seen, k) {
					seen = append(seen, k)
					cost[r][c] += p.edgeCost(e.from, ka, want)
				}
			}
			zero = zero && cost[r][c] == 0
		}
	}
	if !zero {
		n := len(cost) * len(cost[0])
		rowOf, colOf, cost = mergeEqual(rowOf, colOf, cost)
		p.merged += n - len(cost)*len(cost[0])
	}
	switch {
	case zero:
		return pairCost{}, false
	case len(cost) == 1:
		for km := range p.nodeCost[m] {
			p.nodeCost[m][km] += cost[0][colOf[km]]
		}
		return pairCost{}, false
	case len(cost[0]) == 1:
		for ka := range p.nodeCost[a] {
			p.nodeCost[a][ka] += cost[rowOf[ka]][0]
		}
		return pairCost{}, false
	}
	return pairCost{a, m, rowOf, colOf, cost}, true
}

// mergeEqual merges the row classes of a pair whose costs are equal cell for cell, then the
// column classes, until none are: the ILP cannot tell two such classes apart (a transport
// over the merged classes is the image of the full one, and every merged point splits
// back in proportion to the classes' node sums), so its optimum and its relaxation stay,
// with fewer edge variables (a convolution's layouts that reshard alike, for one). rowOf
// and colOf map strategies to classes; merged classes are numbered in order of their
// first class.
func mergeEqual(rowOf, colOf []int, cost [][]float64) ([]int, []int, [][]float64) {
	for {
		nr, nc := len(cost), len(cost[0])
		rowOf, cost = mergeRows(rowOf, cost)
		colOf, cost = mergeRows(colOf, transpose(cost))
		cost = transpose(cost)
		if len(cost) == nr && len(cost[0]) == nc {
			return rowOf, colOf, cost
		}
	}
}

// mergeRows merges the equal rows of cost, renumbering of.
func mergeRows(of []int, cost [][]float64) ([]int, [][]float64) {
	seen := map[string]int{}
	to := make([]int, len(cost))
	var out [][]float64
	buf := make([]byte, 0, 8*len(cost[0]))
	for r, row := range cost {
		buf = buf[:0]
		for _, x := range row {
			buf = binary.LittleEndian.AppendUint64(buf, math.Float64bits(x))
		}
		i, ok := seen[string(buf)]
		if !ok {
			i = len(out)
			seen[string(buf)] = i
			out = append(out, row)
		}
		to[r] = i
	}
	if len(out) == len(cost) {
		return of, cost
	}
	nof := make([]int, len(of))
	for k, c := range of {
		nof[k] = to[c]
	}
	return nof, out
}

func transpose(m [][]float64) [][]float64 {
	t := make([][]float64, len(m[0]))
	for c := range t {
		t[c] = make([]float64, len(m))
		for r := range m {
			t[c][r] = m[r][c]
		}
	}
	return t
}

// classes numbers group g's strategies by the tuple of layouts spec(e, k) over the edges;
// it returns each strategy's class and one representative strategy per class. Classes
// are numbered in the order of their first strategy.
func (p *planner) classes(g int, es []edge, spec func(edge, int) mesh.Spec) ([]int, []int) {
	n := len(p.groups[g].strats)
	if len(es) == 1 { // one edge: keyed by its layout's bits, no bytes
		of := make([]int, n)
		var reps []int
		seen := map[uint64]int{}
		for k := range n {
			b := specBits(spec(es[0], k))
			c, ok := seen[b]
			if !ok {
				c = len(reps)
				seen[b] = c
				reps = append(reps, k)
			}
			of[k] = c
		}
		return of, reps
	}
	return classesByKey(n, func(k int, buf []byte) []byte {
		for _, e := range es {
			buf = binary.LittleEndian.AppendUint64(buf, specBits(spec(e, k)))
		}
		return buf
	})
}

// classesByKey numbers strategies 0..n-1 by the bytes key appends for each (into an
// emptied buffer): each strategy's class, classes in the order of their first strategy,
// and one representative strategy per class.
func classesByKey(n int, key func(k int, buf []byte) []byte) ([]int, []int) {
	of := make([]int, n)
	var reps []int
	seen := map[string]int{}
	var buf []byte
	for k := range n {
		buf = key(k, buf[:0])
		c, ok := seen[string(buf)]
		if !ok {
			c = len(reps)
			seen[string(buf)] = c
			reps = append(reps, k)
		}
		of[k] = c
	}
	return of, reps
}

// foldDiagonal charges an edge between two groups that share variables (a value feeding
// its own counterpart in the next identical layer) to the node: both ends take strategy k.
func (p *planner) foldDiagonal(g int, e edge) {
	for k := range p.nodeCost[g] {
		p.nodeCost[g][k] += p.edgeCost(e.from, k, p.want(e, k))
	}
}

// addEdge adds the edge variables of one group pair and their row and column sums (all
// but the last column's, which the others imply); it returns the objective terms.
func (p *planner) addEdge(a, m int, rowOf, colOf []int, cost [][]float64) []ilp.Term {
	nr, nc := len(cost), len(cost[0])
	base := fmt.Sprintf("e.%d.%d.", a, m)
	vars := make([][]ilp.VarID, nr)
	var obj []ilp.Term
	name := []byte(base)
	for r := range nr {
		vars[r] = make([]ilp.VarID, nc)
		row := strconv.AppendInt(name[:len(base)], int64(r), 10)
		row = append(row, '.')
		for c := range nc {
			name = strconv.AppendInt(row, int64(c), 10)
			vars[r][c] = p.prob.AddContinuous(string(name), 0, 1)
			if cost[r][c] != 0 {
				obj = append(obj, ilp.Term{Var: vars[r][c], Coef: cost[r][c]})
			}
		}
	}
	p.edgeVars += nr * nc
	p.edgeRecs = append(p.edgeRecs, edgeRec{a, m, rowOf, colOf, vars})
	for r := range nr {
		terms := make([]ilp.Term, 0, nc+4)
		for c := range nc {
			terms = append(terms, ilp.Term{Var: vars[r][c], Coef: 1})
		}
		for k, cls := range rowOf {
			if cls == r {
				terms = append(terms, ilp.Term{Var: p.s[a][k], Coef: -1})
			}
		}
		p.prob.AddRow(base+"row"+strconv.Itoa(r), terms, ilp.EQ, 0)
	}
	// The last column's sum is implied: the row sums add up to Σ s_a = 1 and the other
	// column sums to 1 − (m's strategies in the last class), by the one-hot rows of a and
	// m. Leaving it out changes neither the integer problem nor its relaxation.
	for c := range nc - 1 {
		terms := make([]ilp.Term, 0, nr+4)
		for r := range nr {
			terms = append(terms, ilp.Term{Var: vars[r][c], Coef: 1})
		}
		for k, cls := range colOf {
			if cls == c {
				terms = append(terms, ilp.Term{Var: p.s[m][k], Coef: -1})
			}
		}
		p.prob.AddRow(base+"col"+strconv.Itoa(c), terms, ilp.EQ, 0)
	}
	return obj
}

// choiceFrom reads the chosen strategy of every representative group from a solution and
// spreads it to the groups tied to it.
func (p *planner) choiceFrom(values []float64) []int {
	choice := make([]int, len(p.groups))
	for gi := range p.groups {
		r := p.rep[gi]
		choice[gi] = -1
		for k, v := range p.s[r] {
			if values[v] > 0.5 {
				choice[gi] = k
			}
		}
		if choice[gi] < 0 {
			panic(fmt.Sprintf("sharding: no strategy chosen for %s", p.g.Value(p.groups[gi].members[0]).Name))
		}
	}
	return choice
}

// assignment writes the ILP assignment of a choice of group strategies: the chosen node
// variables and each edge's unit cell. Evaluate on it checks the ILP against the plan.
func (p *planner) assignment(choice []int) []float64 {
	x := make([]float64, p.prob.NumVars())
	for gi := range p.groups {
		x[p.s[p.rep[gi]][choice[gi]]] = 1
	}
	for _, e := range p.edgeRecs {
		x[e.vars[e.rowOf[choice[e.a]]][e.colOf[choice[e.m]]]] = 1
	}
	for _, r := range p.sharedRecs {
		if r.z >= 0 {
			x[r.y] = max(x[r.y], x[r.z])
		} else if r.colOf[choice[r.m]] == r.c {
			x[r.y] = 1
		}
	}
	for i, h := range p.hMain {
		if p.holds(&p.gath[i], choice) {
			x[h] = 1
		}
	}
	return x
}
