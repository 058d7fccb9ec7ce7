package sharding

import (
	"context"
	"fmt"
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

	cands     [][]Strategy // per value
	groups    []*group
	groupOf   []int // per value
	memberIdx []int // per value: index in its group's members
	rep       []int // per group: the group whose variables it shares (itself unless tied)

	memo    map[reshardKey]mesh.Reshard
	typeKey []string // per value, its type printed once

	// The ILP.
	prob      *ilp.Problem
	s         [][]ilp.VarID // per group (reps only): one binary per strategy
	nodeCost  [][]float64   // per rep group, per strategy: own cost + folded edge costs
	edgeVars  int
	numS      int // the node variables come first, VarIDs 0..numS-1
	numOneHot int // and their one-hot rows, RowIDs 0..numOneHot-1

	first, last []int // per value: its live range (memory.go)

	edgeRecs []edgeRec
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
// to): a GPT step prices the same few pairs thousands of times.
func (p *planner) reshard(v ir.ValueID, from, to mesh.Spec) mesh.Reshard {
	t := p.g.Value(v).Type
	if p.typeKey[v] == "" {
		p.typeKey[v] = t.String()
	}
	k := reshardKey{p.typeKey[v], specBits(from), specBits(to)}
	if r, ok := p.memo[k]; ok {
		return r
	}
	if r, ok := p.opts.Reshard.get(k); ok {
		p.memo[k] = r
		return r
	}
	r, err := mesh.ReshardCost(p.lm, t.Shape, t.DType.Size(), from, to)
	if err != nil {
		panic(fmt.Sprintf("sharding: resharding %s from %s to %s: %v", p.g.Value(v).Name, from, to, err))
	}
	p.memo[k] = r
	p.opts.Reshard.put(k, r)
	return r
}

// ReshardMemo holds resharding prices on one logical mesh shape, shared by the solves on
// it (see Options.Reshard). The zero value is ready; a nil *ReshardMemo holds nothing.
type ReshardMemo struct {
	mu sync.Mutex
	m  map[reshardKey]mesh.Reshard
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
		out = append(out, edge{u.Value, u.Target, -1})
	}
	return out
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
	var todo []pairCost
	for i, es := range p.pairs() {
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
	for _, t := range todo {
		obj = append(obj, p.addEdge(t.a, t.m, t.rowOf, t.colOf, t.cost)...)
	}
	p.prob.SetObjective(obj, 0)
}

// pairs groups the edges by the (producer, consumer) pair of representative groups, in
// order of the pair; an edge within one representative is folded into its node cost.
func (p *planner) pairs() [][]edge {
	byPair := map[[2]int][]edge{}
	for _, e := range p.edges() {
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
	rowOf, rows := p.classes(a, es, func(e edge, k int) mesh.Spec { return p.outSpec(e.from, k) })
	colOf, cols := p.classes(m, es, p.want)
	cost := make([][]float64, len(rows))
	zero := true
	for r, ka := range rows {
		cost[r] = make([]float64, len(cols))
		for c, km := range cols {
			for _, e := range es {
				cost[r][c] += p.reshard(e.from, p.outSpec(e.from, ka), p.want(e, km)).Time
			}
			zero = zero && cost[r][c] == 0
		}
	}
	switch {
	case zero:
		return pairCost{}, false
	case len(rows) == 1:
		for km := range p.nodeCost[m] {
			p.nodeCost[m][km] += cost[0][colOf[km]]
		}
		return pairCost{}, false
	case len(cols) == 1:
		for ka := range p.nodeCost[a] {
			p.nodeCost[a][ka] += cost[rowOf[ka]][0]
		}
		return pairCost{}, false
	}
	return pairCost{a, m, rowOf, colOf, cost}, true
}

// classes numbers group g's strategies by the tuple of layouts spec(e, k) over the edges;
// it returns each strategy's class and one representative strategy per class.
func (p *planner) classes(g int, es []edge, spec func(edge, int) mesh.Spec) ([]int, []int) {
	n := len(p.groups[g].strats)
	of := make([]int, n)
	seen := map[string]int{}
	var reps []int
	var b strings.Builder
	for k := range n {
		b.Reset()
		for _, e := range es {
			b.WriteString(spec(e, k).String())
			b.WriteByte('|')
		}
		c, ok := seen[b.String()]
		if !ok {
			c = len(reps)
			seen[b.String()] = c
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
		p.nodeCost[g][k] += p.reshard(e.from, p.outSpec(e.from, k), p.want(e, k)).Time
	}
}

// addEdge adds the edge variables of one group pair and their row and column sums; it
// returns the objective terms.
func (p *planner) addEdge(a, m int, rowOf, colOf []int, cost [][]float64) []ilp.Term {
	nr, nc := len(cost), len(cost[0])
	base := fmt.Sprintf("e.%d.%d.", a, m)
	vars := make([][]ilp.VarID, nr)
	var obj []ilp.Term
	for r := range nr {
		vars[r] = make([]ilp.VarID, nc)
		for c := range nc {
			vars[r][c] = p.prob.AddContinuous(base+strconv.Itoa(r)+"."+strconv.Itoa(c), 0, 1)
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
	for c := range nc {
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
	return x
}
