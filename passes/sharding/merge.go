package sharding

import (
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
	pick          []int32 // parallel to members
	compute, comm float64 // summed over members
	reshard       float64 // resharding inside the group (a follower that cannot match)
}

func (s groupStrategy) cost() float64 { return s.compute + s.comm + s.reshard }

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
	for id := range n {
		v := ir.ValueID(id)
		u := ir.NoValue
		if merge && !p.forced(v) {
			u = leaderOf(p.g, v)
		}
		if u == ir.NoValue || p.forced(u) {
			p.newGroup(v)
			continue
		}
		p.follow(p.groupOf[u], u, v)
	}
}

func (p *planner) newGroup(v ir.ValueID) {
	gr := &group{members: []ir.ValueID{v}}
	for k := range p.cands[v] {
		s := &p.cands[v][k]
		gr.strats = append(gr.strats, groupStrategy{pick: []int32{int32(k)}, compute: s.Compute, comm: s.Comm})
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
	extend := func(firstOnly bool) []groupStrategy {
		var out []groupStrategy
		for _, gs := range gr.strats {
			ms := p.matches(u, v, p.cands[u][gs.pick[ui]].Out, slots)
			if firstOnly {
				ms = ms[:1]
			}
			for _, m := range ms {
				s := &p.cands[v][m.k]
				pick := gs.pick
				if len(ms) > 1 {
					// Several children: each needs its own copy. A single child takes over gs's
					// slice, which nothing else refers to once gr.strats is replaced.
					pick = append(make([]int32, 0, len(gs.pick)+1), gs.pick...)
				}
				out = append(out, groupStrategy{pick: append(pick, int32(m.k)),
					compute: gs.compute + s.Compute, comm: gs.comm + s.Comm, reshard: gs.reshard + m.reshard})
			}
		}
		return out
	}
	out := extend(false)
	if len(out) > maxGroupStrategies {
		out = extend(true)
	}
	gr.strats = out
}

type match struct {
	k       int
	reshard float64
}

// matches lists v's strategies whose operand specs at slots equal from, cheapest first
// (ties in generation order); if there are none, the one strategy minimizing its own cost
// plus the resharding of u into it.
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
			for j := i; j > 0 && p.cands[v][exact[j].k].Cost() < p.cands[v][exact[j-1].k].Cost(); j-- {
				exact[j], exact[j-1] = exact[j-1], exact[j]
			}
		}
		return exact
	}
	best, bestCost, bestR := -1, 0.0, 0.0
	for k := range p.cands[v] {
		s := &p.cands[v][k]
		r := 0.0
		for _, i := range slots {
			r += p.reshard(u, from, s.In[i]).Time
		}
		if c := s.Cost() + r; best < 0 || c < bestCost {
			best, bestCost, bestR = k, c, r
		}
	}
	return []match{{k: best, reshard: bestR}}
}

func allEqual(in []mesh.Spec, slots []int, s mesh.Spec) bool {
	for _, i := range slots {
		if !in[i].Equal(s) {
			return false
		}
	}
	return true
}
