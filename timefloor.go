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
// memory, the Lagrangian bound of its memory rows (Under) after lagSweeps sweeps. Under bounds w·t + u of every plan of
// the range that fits the memory plainly. Which plans the range's price comes from
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
// once, and reports whether it did. Only for a whole-network range under RematAuto or
// RematNone, weighed as priced, not pruned.
func (o *oracle) lagRefute(start, end int, s mesh.Submesh, l mesh.LogicalShape) bool {
	k := rangeKey{start, end, s, l}
	if _, done := o.lagDuals[k]; done || !o.dualApplies(start, end) || o.remat == RematFull || o.memory <= 0 {
		return false
	}
	if o.lagDuals == nil {
		o.lagDuals = map[rangeKey][2]float64{}
	}
	none := math.Inf(-1)
	o.lagDuals[k] = [2]float64{none, none}
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
	var d sharding.MemoryDual
	bound := func() string {
		d, err = sharding.MemoryBound(o.ctx, sg.g, lm, opts, lagSweeps)
		if err != nil {
			return fmt.Sprintf("%q", err.Error())
		}
		return fmt.Sprintf("bound %.6g under %.6g fits %v per-edge %d sweeps %d", d.Bound, d.Under, d.Fits, d.PerEdgeValues, d.Sweeps)
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
	w := o.weight(start)
	mb, step := sg.dataBound(o.c, lm.Size())
	redo := 0.0 // what recomputing adds at least (redoBound), where the layers are known
	for k := start; k < end && o.layerInfos() != nil; k++ {
		redo += o.redoBound(k, s, l)
	}
	slack := func(x float64) float64 { return x - dualSlack*math.Abs(x) }
	plain := slack(d.Under) + w*mb + step
	remat := slack(d.Bound) + w*(mb+redo) + step
	if d.Fits {
		remat = slack(d.Under) + w*(mb+redo) + step
	}
	o.lagDuals[k] = [2]float64{plain, remat}
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
