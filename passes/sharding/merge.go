package sharding

import (
	"slices"

	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/mesh"
)

// group is one node of the ILP: a leader op and the followers merged into it.
type group struct {
	members []ir.ValueID // leader first, then followers in ID order
	strats  []groupStrategy
}

// groupStrategy is one strategy of a group: a strategy index for each member.
type groupStrategy struct {
	pick []int32 // parallel to members
	// obj is the group's own cost in the objective: its members' compute and collectives
	// and the resharding inside it, each weighed as the step runs it (weights.go).
	obj     float64
	reshard float64 // the resharding inside the group with its spills, unweighted
}

func (s groupStrategy) cost() float64 { return s.obj }

// maxGroupStrategies bounds the strategies of one group: past it a follower keeps only its
// cheapest matching strategy per leader strategy.
const maxGroupStrategies = 256

// leaderOf returns the operand v follows, or NoValue. As in Alpa, a follower op (see
// ir.OpDef.Follower) follows one operand: its largest operand that is not a leaf, or, when all
// are leaves, its largest param, state or input (a cast of a param follows the param).
// Constants and iotas are never followed. Ties go to the first operand. The leader may
// have other users: they keep their own edges to it.
func leaderOf(g *ir.Graph, v ir.ValueID) ir.ValueID {
	val := g.Value(v)
	if !val.Op.Def().Follower {
		return ir.NoValue
	}
	best, bestLeaf, bestBytes := ir.NoValue, true, int64(-1)
	for _, a := range val.Args {
		op := g.Value(a).Op
		if op == ir.OpConstant || op == ir.OpIota {
			continue
		}
		leaf, b := op.IsLeaf(), g.Value(a).Type.Bytes()
		if best == ir.NoValue || bestLeaf && !leaf || leaf == bestLeaf && b > bestBytes {
			best, bestLeaf, bestBytes = a, leaf, b
		}
	}
	return best
}

// buildGroups merges followers into their leaders (unless merge is false or a value is
// forced) and expands each group's strategies. It returns the groups and, per value, its
// group and its index among the group's members.
func (p *planner) buildGroups(merge bool) {
	n := len(p.g.Values)
	p.groupOf = make([]int, n)
	p.memberIdx = make([]int, n)
	var fills map[ir.ValueID][]ir.ValueID
	if merge && !p.opts.noFill {
		fills = p.fills()
	}
	filled := map[ir.ValueID]bool{}
	for _, cs := range fills {
		for _, c := range cs {
			filled[c] = true
		}
	}
	for id := range n {
		v := ir.ValueID(id)
		if filled[v] {
			continue // grouped with its reader below
		}
		u := ir.NoValue
		if merge && !p.forced(v) {
			u = leaderOf(p.g, v)
		}
		if u == ir.NoValue || p.forced(u) {
			p.newGroup(v)
		} else {
			p.follow(p.groupOf[u], u, v)
		}
	}
	// Constants join their readers' groups once followers are merged, so that merging
	// sees the groups it saw without them (its maxGroupStrategies cut is not exact).
	for id := range n {
		for _, c := range fills[ir.ValueID(id)] {
			if !p.fill(p.groupOf[id], ir.ValueID(id), c) {
				p.newGroup(c)
			}
		}
	}
	p.priceInside()
}

// insideRead is one read of a value by a member of its own group: operand slot of member
// to, or (slot −1) the update of member to by the value.
type insideRead struct {
	to   ir.ValueID
	slot int
}

// findInside lists, per value, its reads inside its group (p.inside), once the groups are
// made; a no-op when listed already.
func (p *planner) findInside() {
	if p.inside != nil {
		return
	}
	p.inside = make([][]insideRead, len(p.g.Values))
	for id := range p.g.Values {
		to := ir.ValueID(id)
		for i, a := range p.g.Values[id].Args {
			if p.groupOf[a] == p.groupOf[to] {
				p.inside[a] = append(p.inside[a], insideRead{to, i})
			}
		}
	}
	for _, u := range p.g.Updates {
		if p.groupOf[u.Value] == p.groupOf[u.Target] {
			p.inside[u.Value] = append(p.inside[u.Value], insideRead{u.Target, -1})
		}
	}
}

// priceInside prices every strategy of every group as Result counts its plan: its
// members' compute and collectives, and each member's resharding into each distinct
// layout its readers in the group want, once, with the spill (fusedSpill) where a reader
// in the member's kernel wants that layout. follow and fill price a follower's reads of
// its leader (and a filled constant's reads) edge by edge while they build the strategies,
// which counts a layout twice where two readers in the group want it and not at all where
// a follower reads a member other than its leader (a layer norm's sub reading the
// broadcast of its mean): docs/DECISIONS.md, "Round eleven, objcost". The readers in
// other groups are priced on the ILP's edges, which charge nothing for a layout the
// group has made already (made).
func (p *planner) priceInside() {
	p.findInside()
	var seen []uint64
	for _, gr := range p.groups {
		for k := range gr.strats {
			gs := &gr.strats[k]
			obj, inner := 0.0, 0.0
			for mi, m := range gr.members {
				obj += p.ownCost(m, &p.cands[m][gs.pick[mi]])
			}
			for mi, a := range gr.members {
				if len(p.inside[a]) == 0 {
					continue
				}
				s := &p.cands[a][gs.pick[mi]]
				seen = append(seen[:0], specBits(s.Out)) // read as made: nothing to pay
				x := 0.0
				for _, r := range p.inside[a] {
					want := p.wantIn(gr, gs, r)
					b := specBits(want)
					if slices.Contains(seen, b) {
						continue
					}
					seen = append(seen, b)
					t := p.reshard(a, s.Out, want).Time
					if t == 0 {
						continue
					}
					x += t
					for _, q := range p.inside[a] {
						if q.slot >= 0 && p.fu.internal(a, q.to) && specBits(p.wantIn(gr, gs, q)) == b {
							x += p.fusedSpill(a, s.Memory, []mesh.Spec{want}, []int{0})
							break
						}
					}
				}
				obj += p.wReshard[a] * x
				inner += x
			}
			gs.obj, gs.reshard = obj, inner
		}
	}
}

// wantIn is the layout read r wants under strategy gs of its group gr.
func (p *planner) wantIn(gr *group, gs *groupStrategy, r insideRead) mesh.Spec {
	s := &p.cands[r.to][gs.pick[p.memberIdx[r.to]]]
	if r.slot < 0 {
		return s.Out
	}
	return s.In[r.slot]
}

// fills finds the constants and iotas that fold into their consumer's group: those read by
// exactly one op and not a graph output, unforced, with more than one strategy. Such a
// value is filled in whatever layout is chosen for it and nothing else reads it, so its
// layout only matters to its one consumer. It returns them per consumer, in ID order.
func (p *planner) fills() map[ir.ValueID][]ir.ValueID {
	n := len(p.g.Values)
	reader := make([]ir.ValueID, n)
	for i := range reader {
		reader[i] = ir.NoValue
	}
	many := make([]bool, n)
	for id := range n {
		for _, a := range p.g.Values[id].Args {
			if reader[a] != ir.NoValue && reader[a] != ir.ValueID(id) {
				many[a] = true
			}
			reader[a] = ir.ValueID(id)
		}
	}
	for _, o := range p.g.Outputs {
		many[o.Value] = true
	}
	for _, u := range p.g.Updates {
		many[u.Value], many[u.Target] = true, true
	}
	out := map[ir.ValueID][]ir.ValueID{}
	for id := range n {
		v := ir.ValueID(id)
		op := p.g.Values[id].Op
		if op != ir.OpConstant && op != ir.OpIota || many[id] || reader[id] == ir.NoValue || len(p.cands[id]) < 2 ||
			p.forced(v) || p.forced(reader[id]) {
			continue
		}
		out[reader[id]] = append(out[reader[id]], v)
	}
	return out
}

// fill adds constant (or iota) c, read only by u, to u's group gi: each group strategy is
// extended by c's layouts that are Pareto-optimal in (resharding c into what u's strategy
// wants, c's bytes), c's own costs being zero. It is exact: c has no other edges, so any
// other layout of c costs no less time and memory in every plan. It reports false, and
// changes nothing, when the group would exceed maxGroupStrategies.
func (p *planner) fill(gi int, u, c ir.ValueID) bool {
	gr := p.groups[gi]
	ui := p.memberIdx[u]
	var slots []int
	for i, a := range p.g.Value(u).Args {
		if a == c {
			slots = append(slots, i)
		}
	}
	type opt struct {
		j int
		x float64
	}
	memo := map[string][]opt{}
	var out []groupStrategy
	for _, gs := range gr.strats {
		in := p.cands[u][gs.pick[ui]].In
		key := ""
		for _, i := range slots {
			key += in[i].String() + "|"
		}
		opts, ok := memo[key]
		if !ok {
			xs := make([]float64, len(p.cands[c]))
			for j := range p.cands[c] {
				seen := map[string]bool{}
				for _, i := range slots {
					if w := in[i].String(); !seen[w] {
						seen[w] = true
						xs[j] += p.reshard(c, p.cands[c][j].Out, in[i]).Time
					}
				}
			}
			for j := range p.cands[c] {
				mj, dom := p.cands[c][j].Memory, false
				for i := range p.cands[c] {
					mi := p.cands[c][i].Memory
					if i != j && xs[i] <= xs[j] && mi <= mj && (xs[i] < xs[j] || mi < mj || i < j) {
						dom = true
						break
					}
				}
				if !dom {
					opts = append(opts, opt{j, xs[j]})
				}
			}
			memo[key] = opts
		}
		for _, o := range opts {
			pick := append(append(make([]int32, 0, len(gs.pick)+1), gs.pick...), int32(o.j))
			out = append(out, groupStrategy{pick: pick}) // priced by priceInside
		}
	}
	if len(out) > max(maxGroupStrategies, len(gr.strats)) {
		return false
	}
	p.groupOf[c], p.memberIdx[c] = gi, len(gr.members)
	gr.members = append(gr.members, c)
	gr.strats = out
	return true
}

func (p *planner) newGroup(v ir.ValueID) {
	gr := &group{members: []ir.ValueID{v}}
	for k := range p.cands[v] {
		gr.strats = append(gr.strats, groupStrategy{pick: []int32{int32(k)}}) // priced by priceInside
	}
	p.groupOf[v] = len(p.groups)
	p.memberIdx[v] = 0
	p.groups = append(p.groups, gr)
}

// follow adds v to group gi (which holds u) and extends every group strategy with v's
// strategies that take u exactly as u is produced; when none does, with v's cheapest
// strategy counting the resharding of u.
func (p *planner) follow(gi int, u, v ir.ValueID) {
	gr := p.groups[gi]
	ui := p.memberIdx[u]
	p.groupOf[v], p.memberIdx[v] = gi, len(gr.members)
	gr.members = append(gr.members, v)
	var slots []int
	for i, a := range p.g.Value(v).Args {
		if a == u {
			slots = append(slots, i)
		}
	}
	memo := map[int32][]match{} // per strategy of u: v's matches
	// copyPick copies a pick with room for one more member, out of chunks shared by the
	// copies (each capped at its own length + 1).
	var arena []int32
	copyPick := func(src []int32) []int32 {
		n := len(src) + 1
		if cap(arena)-len(arena) < n {
			arena = make([]int32, 0, max(4096, n))
		}
		at := len(arena)
		arena = arena[:at+n]
		c := arena[at : at+len(src) : at+n]
		copy(c, src)
		return c
	}
	extend := func(firstOnly bool) []groupStrategy {
		// Size out and the picks' arena up front (the same matches, in the same order, as
		// the loop below takes): growing them was most of a build's allocations.
		nOut, nArena := 0, 0
		for _, gs := range gr.strats {
			ms, ok := memo[gs.pick[ui]]
			if !ok {
				ms = p.matches(u, v, p.cands[u][gs.pick[ui]].Out, slots)
				memo[gs.pick[ui]] = ms
			}
			if firstOnly || len(ms) == 1 {
				nOut++
				continue
			}
			nOut += len(ms)
			nArena += len(ms) * (len(gs.pick) + 1)
		}
		if !firstOnly && nOut > maxGroupStrategies {
			return nil // over the bound: the caller takes the first matches only
		}
		arena = make([]int32, 0, nArena)
		out := make([]groupStrategy, 0, nOut)
		for _, gs := range gr.strats {
			ms := memo[gs.pick[ui]]
			if firstOnly {
				ms = ms[:1]
			}
			for _, m := range ms {
				pick := gs.pick
				if len(ms) > 1 {
					// Several children: each needs its own copy. A single child takes over gs's
					// slice, which nothing else refers to once gr.strats is replaced.
					pick = copyPick(gs.pick)
				}
				out = append(out, groupStrategy{pick: append(pick, int32(m.k))}) // priced by priceInside
			}
		}
		return out
	}
	out := extend(false)
	if out == nil {
		out = extend(true)
	}
	gr.strats = out
}

type match struct {
	k int
}

// matches lists v's strategies whose operand specs at slots equal from, cheapest first
// (ties in generation order); if there are none, the one strategy minimizing its own cost
// plus the resharding of u into it. Costs are weighed as in the objective (weights.go).
func (p *planner) matches(u, v ir.ValueID, from mesh.Spec, slots []int) []match {
	var exact []match
	for k := range p.cands[v] {
		if allEqual(p.cands[v][k].In, slots, from) {
			exact = append(exact, match{k: k})
		}
	}
	if len(exact) > 0 {
		// Cheapest first, stable.
		for i := 1; i < len(exact); i++ {
			for j := i; j > 0 && p.ownCost(v, &p.cands[v][exact[j].k]) < p.ownCost(v, &p.cands[v][exact[j-1].k]); j-- {
				exact[j], exact[j-1] = exact[j-1], exact[j]
			}
		}
		return exact
	}
	best, bestCost := -1, 0.0
	for k := range p.cands[v] {
		s := &p.cands[v][k]
		r := 0.0
		for _, i := range slots {
			r += p.reshard(u, from, s.In[i]).Time
		}
		if c := p.ownCost(v, s) + p.wReshard[u]*r; best < 0 || c < bestCost {
			best, bestCost = k, c
		}
	}
	return []match{{k: best}}
}

func allEqual(in []mesh.Spec, slots []int, s mesh.Spec) bool {
	for _, i := range slots {
		if !in[i].Equal(s) {
			return false
		}
	}
	return true
}

// fusedSpill is what a resharding costs beyond its collectives on an edge inside a kernel
// (fusion.go): u's result, have bytes per device, is written after all, and v reads it back
// in the layouts in gives its slots.
func (p *planner) fusedSpill(u ir.ValueID, have int64, in []mesh.Spec, slots []int) float64 {
	t := p.g.Value(u).Type
	var want int64
	for _, i := range slots {
		b, err := p.lm.LocalBytes(t.Shape, t.DType.Size(), in[i])
		if err != nil {
			panic("sharding: local bytes of a checked spec: " + err.Error())
		}
		want += b
	}
	return p.fu.spill(p.cm, have, want)
}
