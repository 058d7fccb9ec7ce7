package autopar

import (
	"slices"

	"github.com/autopar/autopar/mesh"
	"github.com/autopar/autopar/passes/sharding"
)

// Known plans of a range (issue 13, round twelve, rangewarm). The fast search solves a
// range of several layers by its ILP once its layers' points have composed a plan of it
// (compose.go) and, where the range is large, once its ILP restricted to those layers'
// strategies has priced it (restrict.go). Those are real plans of the range on its mesh,
// and lp_solve, stopped at its iteration limit on the range ILP, may answer with a worse
// one: its branch and bound's best point at the limit depends on the objective's details
// (GPT-2.6B/8's [3,8) on 2×2 moved 51.738 → 52.818 s when objcost changed them). The
// range ILP gets them as sharding.Options.Known: the best one it holds and that fits is
// lp_solve's incumbent, so its answer is never a worse plan than the search knew, in the
// ILP's objective, the plan's price.

// rangeStart is what the ILP of a range of several layers starts from in the fast search:
// lp_solve's incumbent is the best of the plans known of the range that the ILP holds and
// that fit (sharding.Options.Known) and the Lagrangian search's best plan that fits, which
// the sharding pass finds on the way to lp_solve (sharding.Options.Incumbent). The
// exhaustive search solves its ranges as before.
type rangeStart struct {
	known []sharding.KnownPlan
}

// rangeStart returns the start of the ILP of the range of layers sg covers on (s, l), nil
// for a one-layer stage, a graph that is no range of this oracle's, or outside the fast
// search. Its known plans are those the search has before the solve, each named per value
// of sg's graph: the range's restricted plan, the plan its layers' points compose (the
// points composedAt chose), and the plans of the layers' own solutions on (s, l) as solved
// so far (each layer's fastest point under the memory, else its solve without memory
// rows; each layer's leanest point). Nothing is solved for them.
func (o *oracle) rangeStart(sg *stageGraph, s mesh.Submesh, l mesh.LogicalShape) *rangeStart {
	if !o.fast || sg.single || o.layerInfos() == nil {
		return nil
	}
	start, end, ok := o.rangeOf(sg)
	if !ok {
		return nil
	}
	var out []sharding.KnownPlan
	k := rangeKey{start, end, s, l}
	add := func(plan sharding.KnownPlan) {
		if plan == nil {
			return
		}
		for _, q := range out {
			if slices.Equal(q, plan) {
				return
			}
		}
		out = append(out, plan)
	}
	if sol := o.restricted[k]; sol != nil && sol.ok && sol.res != nil {
		add(sharding.PlanOf(sol.res))
	}
	if c, ok := o.composedAt[k]; ok && c.ok && len(c.points) == end-start {
		res := make([]*sharding.Result, len(c.points))
		for j, p := range c.points {
			res[j] = p.res
		}
		add(o.layersPlan(sg, start, res))
	}
	fastest := make([]*sharding.Result, end-start)
	leanest := make([]*sharding.Result, end-start)
	for j := range fastest {
		fastest[j], leanest[j] = o.layerSolved(start+j, s, l)
	}
	add(o.layersPlan(sg, start, fastest))
	add(o.layersPlan(sg, start, leanest))
	return &rangeStart{known: out}
}

// layerSolved returns layer k's solutions on (s, l) known so far, solving nothing: the
// fastest (its first point, else its solve under the memory, else its solve without
// memory rows) and the one of least peak among its points (the fastest where it has none).
func (o *oracle) layerSolved(k int, s mesh.Submesh, l mesh.LogicalShape) (fastest, leanest *sharding.Result) {
	key := solveKey{o.infos[k].sg.hash, s, l}
	for _, p := range o.points[key] {
		if p.res == nil {
			continue
		}
		if fastest == nil {
			fastest = p.res
		}
		if leanest == nil || p.res.PeakMemory < leanest.PeakMemory {
			leanest = p.res
		}
	}
	if fastest != nil {
		return fastest, leanest
	}
	for _, sol := range []*stageSolution{o.solved[key], o.relaxed[key]} {
		if sol != nil && sol.ok && sol.res != nil {
			return sol.res, sol.res
		}
	}
	return nil, nil
}

// rangeOf returns the layers [start, end) whose stage graph sg is.
func (o *oracle) rangeOf(sg *stageGraph) (int, int, bool) {
	for r, g := range o.stages {
		if g == sg {
			return r[0], r[1], true
		}
	}
	return 0, 0, false
}

// layersPlan names, for each value of sg's graph (the range from layer start), the
// strategy of res[j], a plan of layer start+j's graph, for the layer that computes it (a
// leaf: the first layer that reads it), as restrictStage pins a range; nil when a layer
// has no plan or a value no layer names.
func (o *oracle) layersPlan(sg *stageGraph, start int, res []*sharding.Result) sharding.KnownPlan {
	for j, r := range res {
		if r == nil || len(r.Strategies) != len(o.infos[start+j].sg.g.Values) {
			return nil
		}
	}
	plan := make(sharding.KnownPlan, len(sg.g.Values))
	for i := range sg.g.Values {
		v := &sg.g.Values[i]
		for j, r := range res {
			lg := o.infos[start+j].sg.g
			if id, ok := lg.Lookup(v.Name); ok && lg.Value(id).Op == v.Op {
				plan[i] = r.Strategies[id].Name
				break
			}
		}
		if plan[i] == "" {
			return nil
		}
	}
	return plan
}
