package sharding

import (
	"encoding/binary"

	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/mesh"
)

// Dominance pruning (exact). After merging and tying, a strategy t of a node (a
// representative group and the groups tied to it, which share its variables) is dropped
// when another strategy s of the node is at least as good whatever the rest of the plan
// does:
//
//   - memory: every member of every group of the node holds no more bytes under s than
//     under t, so no point of the step needs more memory;
//   - the layouts the node reads from other nodes (the operand specs of its edges in, the
//     layouts of its updates' targets) and those of edges inside the node (two tied
//     groups) are the same under s and t, and so are the layouts each outgoing value's
//     group makes of it inside (made: an edge out wanting one costs nothing), so every
//     cost on those edges is the same for every strategy of every neighbour;
//   - time: own cost(s) − own cost(t) + Σ over the node's edges out of
//     max over the layouts L the consumer may want of max(0, reshard(out_s → L) −
//     reshard(out_t → L)) ≤ 0. The sum bounds from above how much more the node's outgoing
//     values cost to reshard under s than under t, for any choice of the consumers and any
//     of the ILP's ways of pricing them (per pair, once per layout, per edge), so the
//     plan with s in place of t costs no more (the dead-end elimination criterion).
//
// The consumers' layouts are those of their unpruned strategies, so the argument holds for
// every node at once: replacing in an optimal plan each dropped strategy by the one that
// dominated it, and that one by its own dominator if it was dropped too, never costs
// more time nor memory and ends at a kept strategy (a strategy is only dropped by one kept
// at that moment, and a kept one only by a later one). The pruned ILP's optimum therefore
// equals the full ILP's; TestPrunedILPMatchesBruteForce and TestPruneKeepsOptimum check it.
// Ties (equal in all of the above) keep the first strategy.

// nodeInfo gathers what dominance needs to know about one node's edges.
type nodeInfo struct {
	groups []int        // the node's groups, representative first
	in     []edge       // edges whose layout must be equal under s and t
	inOut  []ir.ValueID // values of the node whose output layout must be equal
	out    []ir.ValueID // values of the node read by other nodes
	outE   map[ir.ValueID][]edge
	diag   []edge // edges between two groups of the node: both specs must be equal
}

// pruneDominated drops dominated strategies from every node (see above). It runs after
// tie, before buildILP, and keeps the strategies of tied groups index-aligned.
func (p *planner) pruneDominated() {
	if p.opts.NoPrune {
		return
	}
	nodes := map[int]*nodeInfo{}
	node := func(r int) *nodeInfo {
		n := nodes[r]
		if n == nil {
			n = &nodeInfo{outE: map[ir.ValueID][]edge{}}
			nodes[r] = n
		}
		return n
	}
	for gi := range p.groups {
		n := node(p.rep[gi])
		if gi == p.rep[gi] {
			n.groups = append([]int{gi}, n.groups...)
		} else {
			n.groups = append(n.groups, gi)
		}
	}
	for _, e := range p.edges() {
		a, m := p.rep[p.groupOf[e.from]], p.rep[p.groupOf[e.to]]
		if a == m {
			node(a).diag = append(node(a).diag, e)
			continue
		}
		node(m).in = append(node(m).in, e)
		na := node(a)
		if _, ok := na.outE[e.from]; !ok {
			na.out = append(na.out, e.from)
		}
		na.outE[e.from] = append(na.outE[e.from], e)
	}
	// The layouts each edge's consumer may want, over all its node's (unpruned) strategies.
	wants := map[edge][]mesh.Spec{}
	for _, n := range nodes {
		for _, v := range n.out {
			for _, e := range n.outE[v] {
				if _, ok := wants[e]; ok {
					continue
				}
				m := p.rep[p.groupOf[e.to]]
				seen := map[uint64]bool{}
				var ws []mesh.Spec
				for k := range p.groups[m].strats {
					w := p.want(e, k)
					if b := specBits(w); !seen[b] {
						seen[b] = true
						ws = append(ws, w)
					}
				}
				wants[e] = ws
			}
		}
	}
	for r := range p.groups {
		if p.rep[r] != r || len(p.groups[r].strats) < 2 {
			continue
		}
		p.pruneNode(nodes[r], wants)
	}
}

// pruneNode drops the dominated strategies of one node.
func (p *planner) pruneNode(n *nodeInfo, wants map[edge][]mesh.Spec) {
	r := n.groups[0]
	ns := len(p.groups[r].strats)
	own := make([]float64, ns)
	key := make([]string, ns)
	var b []byte
	var made []uint64
	for k := range ns {
		for _, gi := range n.groups {
			own[k] += p.groups[gi].strats[k].cost()
		}
		b = b[:0]
		for _, e := range n.in {
			b = binary.LittleEndian.AppendUint64(b, specBits(p.want(e, k)))
		}
		for _, e := range n.diag {
			b = binary.LittleEndian.AppendUint64(b, specBits(p.outSpec(e.from, k)))
			b = binary.LittleEndian.AppendUint64(b, specBits(p.want(e, k)))
		}
		// An edge out of the node wanting a layout the value's group makes of it inside
		// (made) costs nothing; the resharding inside is in the own cost. Where both
		// strategies make the same layouts, the edge costs differ as the bound below says.
		for _, v := range n.out {
			b = p.appendMade(b, v, k, &made)
		}
		for _, e := range n.diag {
			b = p.appendMade(b, e.from, k, &made)
		}
		key[k] = string(b)
	}
	// bound memoizes, per outgoing value and pair of its layouts, the most the value's
	// resharding can cost more under the first than under the second.
	type boundKey struct {
		v    ir.ValueID
		s, t uint64
	}
	bounds := map[boundKey]float64{}
	// costs memoizes, per outgoing value and layout, the weighed resharding into each
	// layout its edges' consumers may want (the edges' wants, in order, one after another).
	type costKey struct {
		v ir.ValueID
		s uint64
	}
	costs := map[costKey][]float64{}
	costsOf := func(v ir.ValueID, from mesh.Spec, bits uint64) []float64 {
		ck := costKey{v, bits}
		cs, ok := costs[ck]
		if !ok {
			for _, e := range n.outE[v] {
				for _, w := range wants[e] {
					cs = append(cs, p.reshardCost(v, from, w))
				}
			}
			costs[ck] = cs
		}
		return cs
	}
	bound := func(s, t int) float64 {
		sum := 0.0
		for _, v := range n.out {
			from, to := p.outSpec(v, s), p.outSpec(v, t)
			if from.Equal(to) {
				continue
			}
			bk := boundKey{v, specBits(from), specBits(to)}
			x, ok := bounds[bk]
			if !ok {
				fc, tc := costsOf(v, from, bk.s), costsOf(v, to, bk.t)
				at := 0
				for _, e := range n.outE[v] {
					worst := 0.0
					for range wants[e] {
						worst = max(worst, fc[at]-tc[at])
						at++
					}
					x += worst
				}
				bounds[bk] = x
			}
			sum += x
		}
		return sum
	}
	memLE := func(s, t int) (le, less bool) {
		for _, gi := range n.groups {
			gr := p.groups[gi]
			for mi, v := range gr.members {
				ms := p.cands[v][gr.strats[s].pick[mi]].Memory
				mt := p.cands[v][gr.strats[t].pick[mi]].Memory
				if ms > mt {
					return false, false
				}
				less = less || ms < mt
			}
		}
		return true, less
	}
	// dominates reports whether s may replace t: no worse in everything, and strictly
	// better in something or earlier.
	dominates := func(s, t int) bool {
		if key[s] != key[t] || own[s] > own[t] {
			return false
		}
		le, less := memLE(s, t)
		if !le {
			return false
		}
		d := own[s] - own[t] + bound(s, t)
		return d < 0 || d == 0 && (less || s < t)
	}
	// Strategies of different keys never dominate each other: each key keeps its own list,
	// in the order of the strategies.
	dropped := make([]bool, ns)
	keptOf := map[string][]int{}
	nkept := 0
	for t := range ns {
		kept := keptOf[key[t]]
		dom := false
		for _, s := range kept {
			if dominates(s, t) {
				dom = true
				break
			}
		}
		if dom {
			dropped[t] = true
			continue
		}
		live := kept[:0]
		for _, u := range kept {
			if dominates(t, u) {
				dropped[u] = true
				nkept--
			} else {
				live = append(live, u)
			}
		}
		keptOf[key[t]] = append(live, t)
		nkept++
	}
	if nkept == ns {
		return
	}
	for _, gi := range n.groups {
		gr := p.groups[gi]
		out := gr.strats[:0]
		for k, gs := range gr.strats {
			if !dropped[k] {
				out = append(out, gs)
			}
		}
		gr.strats = out
	}
	p.pruned += ns - nkept
}
