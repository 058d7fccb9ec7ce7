package autopar

import (
	"fmt"
	"math"

	"github.com/autopar/autopar/dp"
	"github.com/autopar/autopar/mesh"
	"github.com/autopar/autopar/passes/sharding"
)

// Time floors of memory-bound whole-network ranges (issue 13, round ten, branch timefloor).
//
// A range's optimistic price sums its layers' optima, each solved alone: a bound on the
// range's ILP, but a weak one where those optima do not fit the device together. GPT-
// 6.7B's one-stage whole network on 16 devices at 16 GiB sums to 1.5 s a micro-batch while
// its range ILP's plans that fit take about 16 s; only that ILP's own solve (20-60 CPU s
// each, per 16-device mesh) used to raise the price, and the dual bound refute computes
// (rangeDual) is void there: the ILP prices 418 values' resharding once per consumer
// (ILPStats.PerEdgeValues), so its objective may exceed the plan's cost.
//
// lagRefute bounds such a range by sharding.MemoryBound: the same ILP with every value's
// layouts priced once each, inputs and constants included (its objective then is at most
// the plan's cost, weighed as the price is: rangeDual's argument), its message-passing
// dual bound without memory rows (Bound) and, where the free plan does not fit the device
// memory, the Lagrangian bound of its memory rows (Under) after lagSweeps sweeps. Under
// bounds w·t + u of every plan of the range that fits the memory plainly. Which plans the range's price comes from
// (solveStageOpts, RematAuto or RematNone): its ILP solved plainly under the device
// memory; only where that fails with a memory error, again recomputing layer by layer.
// Where MemoryBound decoded a plan that fits plainly (Fits), the plain solve has one to
// answer with, so every way of the price (plain, and the recomputing ways remat.go derives
// from the same plan, slower by the recomputed values' time, at least redoBound's sum) is
// of a plan that fits plainly: each way's w·t + u is at least Under, and the recomputing
// ways' at least Under + w·Σ redoBound. Otherwise the plain way is bounded by Under (the DP
// accepts it only where the plan fits plainly: Memory(1) is its plain peak or more) and the
// recomputing ways by Bound + w·Σ redoBound. As rangeDual, only for a whole-network range,
// a one-stage plan, whose step is exactly B·t + u.

// lagSweeps bounds the message-passing sweeps of the Lagrangian search of lagRefute's
// MemoryBound: GPT-6.7B's whole network at 32 micro-batches on 4×4 proves 126 s (3.9 s
// a micro-batch) after 400, against 1.5 s summed over its layers.
const lagSweeps = 400

// lagRefute computes the memory-aware bounds of layers [start, end) on (s, l) (see above)
// once, its search stopped where the plain way's bound reaches target (lagTarget; +Inf or
// 0: none), and reports whether it did. Only for a whole-network range under RematAuto or
// RematNone, weighed as priced, not pruned.
func (o *oracle) lagRefute(start, end int, s mesh.Submesh, l mesh.LogicalShape, target float64) bool {
	k := rangeKey{start, end, s, l}
	before, done := o.lagDuals[k]
	cut, short := o.lagCut[k]
	if done && (!short || target <= cut[0] || before[0] >= target) {
		return false // its search ran to its end, or to this target already
	}
	if !o.dualApplies(start, end) || o.remat == RematFull || o.memory <= 0 {
		return false
	}
	if o.lagDuals == nil {
		o.lagDuals, o.lagCut = map[rangeKey][2]float64{}, map[rangeKey][2]float64{}
	}
	none := math.Inf(-1)
	if !done {
		before = [2]float64{none, none}
		o.lagDuals[k] = before
	}
	delete(o.lagCut, k)
	sg, err := o.stage(start, end)
	if err != nil || !sg.weighsAsPriced() {
		return false
	}
	lm, err := mesh.NewLogicalMesh(o.c, s, l[0], l[1])
	if err != nil {
		return false
	}
	n := float64(lm.Size())
	if float64(sg.weights)/n > pruneFactor*float64(o.memory) {
		return false // priced as pruned, not solved (solveStageOpts)
	}
	opts := o.solveOptions(sg, s, l, o.memory)
	w := o.weight(start)
	mb, step := sg.dataBound(o.c, lm.Size())
	redo := 0.0 // what recomputing adds at least (redoBound), where the layers are known
	for k := start; k < end && o.layerInfos() != nil; k++ {
		redo += o.redoBound(k, s, l)
	}
	slack := func(x float64) float64 { return x - dualSlack*math.Abs(x) }
	// ways is each way's bound from what MemoryBound proves (see above).
	ways := func(d sharding.MemoryDual) (plain, remat float64) {
		plain = slack(d.Under) + w*mb + step
		remat = slack(d.Bound) + w*(mb+redo) + step
		if d.Fits {
			remat = slack(d.Under) + w*(mb+redo) + step
		}
		return plain, remat
	}
	// The search stops once the plain way reaches the target (lagTarget, where the range
	// loses): the recomputing way's bound rises only where the search decodes a plan that
	// fits (then it is the plain way's and more). A search stopped so is run again where a
	// later target asks more of it (lagCut), its doublings from the multiplier it reached.
	var enough func(sharding.MemoryDual) bool
	stopped := false
	if t := target; t > 0 && !math.IsInf(t, 1) {
		enough = func(d sharding.MemoryDual) bool {
			plain, _ := ways(d)
			stopped = plain >= t
			return stopped
		}
	}
	var d sharding.MemoryDual
	bound := func() string {
		d, err = sharding.MemoryBoundUntil(o.ctx, sg.g, lm, opts, lagSweeps, cut[1], enough)
		if err != nil {
			return fmt.Sprintf("%q", err.Error())
		}
		return fmt.Sprintf("bound %.6g under %.6g fits %v per-edge %d sweeps %d target %.6g", d.Bound, d.Under, d.Fits, d.PerEdgeValues, d.Sweeps, target)
	}
	if stageTrace != nil {
		stageTrace(fmt.Sprintf("B%d,%s,%.8s,%dh%dd,%dx%d,%.2f,lagdual", o.mb, sg.g.Name, sg.hash, s.Hosts, s.Devices, l[0], l[1],
			float64(o.memory)/(1<<30)), bound)
	} else {
		bound()
	}
	if err != nil || d.PerEdgeValues > 0 || !finite(d.Bound) || !finite(d.Under) {
		return false
	}
	plain, remat := ways(d)
	o.lagDuals[k] = [2]float64{max(plain, before[0]), max(remat, before[1])}
	if stopped {
		o.lagCut[k] = [2]float64{target, d.Mu}
	}
	return true
}

func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

// lagRaised is c, the optimistic price of layers [start, end) on (s, l), with each way's
// step part raised so that w·t + u is at least its bound where lagRefute computed one.
func (o *oracle) lagRaised(c dp.StageCost, start, end int, s mesh.Submesh, l mesh.LogicalShape) dp.StageCost {
	v, ok := o.lagDuals[rangeKey{start, end, s, l}]
	if !ok || math.IsInf(v[0], -1) {
		return c
	}
	w := o.weight(start)
	return eachWay(c, func(x *dp.StageCost) {
		total := v[0]
		if x.Recompute {
			total = v[1]
		}
		x.Step = max(x.Step, total-w*x.Time)
	})
}

// lagHeadroom is how far past the count's cutoff lagTarget asks a bound to reach: a
// cutoff rises by the yields between counts (0.5 % each, yieldMargin), and each rise past
// a stopped search's target runs it again, its planner built anew (GPT-6.7B/16: count
// 32's cutoff rose 53.1 → 56.3 → 57.4 → 59.3 s).
var lagHeadroom = 0.03

// lagTarget is the step a count's one-stage plan is bounded to at least, if its search
// reaches it, before exactly plans again: past the count's cutoff (searchAll: the best plan
// known plus boundMargin, or the next count's bound, where the count yields) by
// lagHeadroom, but never past top·(1 + boundMargin), where the count loses to the best
// plan known whatever comes later, nor past the count's incumbent's step, where its plan
// is within exactly's tolerance of its bound. top and the incumbent only fall as the
// search goes on; a cutoff rises when the count resumes after a yield, and lagRefute then
// resumes a search stopped at the old target (lagCut). +Inf where none is known.
func lagTarget(cutoff, top float64, best *dp.Result) float64 {
	t := math.Inf(1)
	if cutoff > 0 {
		t = cutoff * (1 + lagHeadroom)
	}
	if top > 0 && !math.IsInf(top, 1) {
		t = min(t, top*(1+boundMargin))
	}
	if best != nil && best.Time > 0 {
		t = min(t, best.Time)
	}
	return t
}
