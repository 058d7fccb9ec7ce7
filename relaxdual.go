package autopar

import (
	"fmt"
	"math"

	"github.com/autopar/autopar/mesh"
	"github.com/autopar/autopar/passes/sharding"
)

// solveRelaxedJob is the lazy search's relaxed solve of a layer (unsolved's relaxed jobs,
// bound.go's solveRelaxed), except on the whole cluster, where the layer's price is asked
// for a bound only: the certificate's dual bound (sharding.FreeBound) answers it where it
// does not close, instead of lp_solve (issue 13, branch moe70b). MoE-70B/64's layers 0 and
// 7 on 8×8 at 32 and 64 micro-batches: three certificates left open (gaps 5.2, 0.10 and
// 1.5 %), whose lp_solve solves took 8.2 of the compile's 25 CPU s, only to price the whole
// network on all 64 devices, which they then put past every count's plan.
//
// Why the whole cluster only: a stage on every device is the only stage of its plan, the
// whole network, whose step is w·t + u with w its micro-batch count (weight), the weight
// the layer's ILP is weighed at when it is a first stage's (weighedLayer) and 1 otherwise
// (then lower bounds its price by t + u, reweighed). A bound on that weighed sum (the
// dual bound, plus the data instructions' least price, as rangeDual takes it) raises the
// layer's kernel bound (layerBound) in its step part (stepRaised): no price of a plan
// of the layer, under the memory or not, is below it, as no plan's objective is below the
// relaxation's dual bound. On a smaller mesh the stage may be one of a pipeline, whose step
// takes t alone B − 1 times, so a bound on w·t + u cannot raise u (docs/DECISIONS.md,
// "pipe"): there the relaxed solve runs as before. Where the certificate closes its answer
// is the solve (FreeDual.Answer, as Solve returns it); where the ILP prices a value per
// consumer or a leaf off its least layout, the dual bound bounds the objective but not the
// price (FreeDual), and lp_solve solves it as before. The bound is no plan: the layer is
// not solved by it (exact false), so where a plan runs the layer on the whole cluster its
// solve under the memory comes next, as for any relaxed solve that did not fit.
func (o *oracle) solveRelaxedJob(sg *stageGraph, s mesh.Submesh, l mesh.LogicalShape) *stageSolution {
	if !relaxDual || s.NumDevices() != o.c.Devices() || o.lpOnly || o.remat == RematFull || o.memory <= 0 {
		return o.solveRelaxed(sg, s, l)
	}
	lm, err := mesh.NewLogicalMesh(o.c, s, l[0], l[1])
	if err != nil {
		return o.solveRelaxed(sg, s, l)
	}
	d, err := o.freeBound(sg, s, lm, l)
	switch {
	case err != nil:
		return o.solveRelaxed(sg, s, l)
	case d.Answer != nil:
		o.solves.Add(1)
		sg.addData(o.c, d.Answer)
		return o.relaxedOf(sg, lm, d.Answer)
	case math.IsNaN(d.Bound) || math.IsInf(d.Bound, 0):
		return o.solveRelaxed(sg, s, l)
	}
	return &stageSolution{ok: true, dual: true, bound: d.Bound - dualSlack*math.Abs(d.Bound)}
}

// freeBound is the certificate's dual bound of layer sg's ILP on (s, l) without memory
// rows (sharding.FreeBound), traced as a "relaxdual" solve.
func (o *oracle) freeBound(sg *stageGraph, s mesh.Submesh, lm *mesh.LogicalMesh, l mesh.LogicalShape) (sharding.FreeDual, error) {
	opts := o.solveOptions(sg, s, l, relaxedBudget)
	var d sharding.FreeDual
	var err error
	bound := func() string {
		d, err = sharding.FreeBound(o.ctx, sg.g, lm, opts)
		if err != nil {
			return fmt.Sprintf("%q", err.Error())
		}
		return fmt.Sprintf("bound %.6g s closed %v answer %v per-edge %d leaves %d sweeps %d", d.Bound, d.Closed, d.Answer != nil, d.PerEdgeValues, d.LeafValues, d.Sweeps)
	}
	if stageTrace != nil {
		stageTrace(fmt.Sprintf("B%d,%s,%.8s,%dh%dd,%dx%d,%.2f,relaxdual", o.mb, sg.g.Name, sg.hash, s.Hosts, s.Devices, l[0], l[1],
			float64(relaxedBudget)/(1<<30)), bound)
	} else {
		bound()
	}
	return d, err
}

// relaxDual turns solveRelaxedJob's dual bounds on (a variable for the tests, which
// compare with the relaxed solves they replace).
var relaxDual = true

// dualPrice sets sol.cost, for a dual bound of solveRelaxedJob on layer sg at key: the
// layer's kernel bound (boundOf, with the data instructions' least price) with its step
// part raised so that w·t + u is at least the bound plus those data instructions. Run by
// one goroutine (boundOf makes sg's bounder).
func (o *oracle) dualPrice(sg *stageGraph, key solveKey, sol *stageSolution) {
	b, ok := o.bounds[key]
	if !ok {
		b = o.boundOf(sg, key.sub, key.logical)
	}
	if !b.ok {
		sol.ok = false
		return
	}
	w := float64(max(sg.mb, 1))
	mb, step := sg.dataBound(o.c, key.sub.NumDevices())
	sol.cost = stepRaised(b.cost, w, sol.bound+w*mb+step)
}
