package autopar

import (
	"cmp"
	"context"
	goruntime "runtime"
	"slices"

	"github.com/autopar/autopar/dp"
	"github.com/autopar/autopar/mesh"
	"github.com/autopar/autopar/passes/sharding"
)

// The fast search's layer solves are lazy (issue 13, "skip what cannot win"). Before any
// ILP runs, every layer on every logical mesh has a price that costs no ILP: Alpa's
// perfect-scaling bound (layerBound), a true lower bound on the layer's ILP and on its
// share of every range ILP. The DP on optimistic prices (a range solved exactly at its
// ILP, otherwise the sum over its layers of the layer's ILP optimum where solved and its
// bound where not; oracle.lower) bounds every plan from below. settle first solves every
// layer on one device (tiny ILPs whose bound is already their price), then, round by
// round, the cheaper half of the unsolved layers the optimistic plan runs, until the plan
// the composed prices pick is within refineTolerance of the optimistic one. A (layer,
// logical mesh) no optimistic plan runs before then is never solved, and a micro-batch
// count whose optimistic plan loses to the plan found is never started (searchAll). The
// composed DP and exactly then work on the solved layers as before; exactly's rounds
// solve the layers of any later optimistic plan too, so its stop rule (the plan within
// refineTolerance of the optimistic DP's value) keeps its meaning: the skips are bounds,
// not guesses.

// layerBound is the optimistic price of layer k on (s, l) without an ILP: per micro-batch
// and once per step, the sum over the layer's ops of sharding.KernelBounds (the step part
// the ops of the update, as stageGraph.stepPart counts them; the accumulated gradients'
// collectives, which stepPart counts there too, cost at least nothing), the weights spread
// perfectly over the mesh, no activations. Each part is at most the solved layer's
// (stageSolution.cost), so the DP's objective and its memory check on these prices are
// bounds. ok is false when the mesh cannot be built (then no ILP can be solved on it).
func (o *oracle) layerBound(k int, s mesh.Submesh, l mesh.LogicalShape) (dp.StageCost, bool) {
	sg := o.infos[k].sg
	key := solveKey{sg.hash, s, l}
	if b, ok := o.bounds[key]; ok {
		return b.cost, b.ok
	}
	b := o.boundOf(sg, s, l)
	o.bounds[key] = b
	return b.cost, b.ok
}

type boundCost struct {
	cost dp.StageCost
	ok   bool
}

func (o *oracle) boundOf(sg *stageGraph, s mesh.Submesh, l mesh.LogicalShape) boundCost {
	lm, err := mesh.NewLogicalMesh(o.c, s, l[0], l[1])
	if err != nil {
		return boundCost{}
	}
	kb, err := sharding.KernelBounds(sg.g, lm, sharding.Options{Cluster: o.c})
	if err != nil {
		return boundCost{}
	}
	var c dp.StageCost
	for id, t := range kb {
		if sg.once[id] {
			c.Step += t
		} else {
			c.Time += t
		}
	}
	mb, step := sg.dataBound(o.c, lm.Size()) // the loads, stores, constants and accumulation
	c.Time += mb
	c.Step += step
	c.WeightBytes = float64(sg.weights) / float64(lm.Size())
	return boundCost{cost: c, ok: true}
}

// isSolved reports whether layer k's own ILP on (s, l) has run (or is running), and so
// whether layerPoints would answer from it rather than solve it.
func (o *oracle) isSolved(k int, s mesh.Submesh, l mesh.LogicalShape) bool {
	key := solveKey{o.infos[k].sg.hash, s, l}
	if _, ok := o.points[key]; ok {
		return true
	}
	_, ok := o.solved[key]
	return ok
}

// unsolved lists, as solves to run, the layers of plan p's stages whose ILP on their
// stage's mesh has not run, marking them in o.solved. Not all of them: the cheaper half by
// solveEstimate (at least one per core), since the cheap solves may already show that the
// plan loses and spare the dear ones — an ILP on a two-dimensional mesh has several times
// the variables of a one-dimensional one and takes about ten times as long. With
// cheapOnly (the plan found is already within refineTolerance), none on a two-dimensional
// mesh: the cheap ones still buy a better plan where they can.
func (o *oracle) unsolved(p *dp.Result, cheapOnly bool) []job {
	var jobs []job
	for _, st := range p.Stages {
		for k := st.Start; k < st.End; k++ {
			if o.isSolved(k, st.Submesh, st.Logical) || cheapOnly && meshFactor(st.Logical) > 4 {
				continue
			}
			sg := o.infos[k].sg
			jobs = append(jobs, job{key: solveKey{sg.hash, st.Submesh, st.Logical}, sg: sg})
		}
	}
	est := make(map[solveKey]float64, len(jobs))
	total := 0.0
	for _, j := range jobs {
		est[j.key] = o.solveEstimate(j)
		total += est[j.key]
	}
	slices.SortStableFunc(jobs, func(a, b job) int { return cmp.Compare(est[a.key], est[b.key]) })
	n, sum := 0, 0.0
	for n < len(jobs) && (n < goruntime.GOMAXPROCS(0) || sum+est[jobs[n].key] <= total/2) {
		sum += est[jobs[n].key]
		n++
	}
	jobs = jobs[:n]
	for _, j := range jobs {
		o.solved[j.key] = nil
	}
	return jobs
}

// oneDevice lists, as solves to run, every layer on a one-device mesh not solved yet: their
// ILPs are the smallest (one strategy an op), their bounds are their prices already, and
// they give the composed prices a first plan to hold against the optimistic one early.
func (o *oracle) oneDevice() []job {
	var jobs []job
	for _, mk := range o.allMeshes {
		if mk.sub.NumDevices() != 1 {
			continue
		}
		for k := range o.lay.L {
			if !o.isSolved(k, mk.sub, mk.logical) {
				sg := o.infos[k].sg
				key := solveKey{sg.hash, mk.sub, mk.logical}
				o.solved[key] = nil
				jobs = append(jobs, job{key: key, sg: sg})
			}
		}
	}
	return jobs
}

// solveEstimate is a rough relative price of solving j: the strategies an op has on its
// mesh (about one on one device, a few on a line, tens on a two-dimensional mesh) times
// the ILP variables of the same layer solved on another mesh, divided by that mesh's
// factor, or else times the values of its graph.
func (o *oracle) solveEstimate(j job) float64 {
	size := float64(len(j.sg.g.Values))
	for _, mk := range o.allMeshes {
		if pts := o.points[solveKey{j.sg.hash, mk.sub, mk.logical}]; len(pts) > 0 && pts[0].res != nil {
			size = float64(pts[0].res.ILP.Variables) / meshFactor(mk.logical)
			break
		}
	}
	return meshFactor(j.key.logical) * size
}

func meshFactor(l mesh.LogicalShape) float64 {
	switch {
	case l[0] > 1 && l[1] > 1:
		return 40
	case l[0] > 1 || l[1] > 1:
		return 4
	}
	return 1
}

// solveLayers runs the layer solves jobs (on all cores, counted by progress) and forgets
// the composed prices, which may now cover more ranges. The lazy search does not run the
// served variants (compose.go, alignJobs): they doubled its ILPs, and their 2-D solves
// were the dearest of all (docs/DECISIONS.md).
func (o *oracle) solveLayers(jobs []job, progress *ilpProgress) {
	o.run(jobs, progress.more())
	clear(o.composedAt)
}

// optimisticPlan is the DP on optimistic prices (oracle.lower): its value bounds from
// below every plan of this micro-batch count, up to lower's caveat on layer solves.
func (o *oracle) optimisticPlan(ctx context.Context, layers int, dc dp.Cluster, do dp.Options) (*dp.Result, error) {
	do.Progress = nil
	o.optimistic = true
	defer func() { o.optimistic = false }()
	return dp.Solve(ctx, layers, dc, o, do)
}

// settle solves layers lazily: while the optimistic plan runs a layer whose ILP on its
// stage's mesh has not run, it solves (some of) those and plans again, until the optimistic
// plan runs solved layers only, or the plan the composed prices pick is within
// refineTolerance of the optimistic plan (exactly then checks that on the chosen stages'
// own ILPs) and the optimistic plan's unsolved layers are all on 2-D meshes (the dear
// solves: the cheap ones go on, and on the benchmarks they found the exact search's plan
// where the tolerance alone stopped up to 0.15% short of it). Each round solves at least
// one layer, so it ends.
func (o *oracle) settle(ctx context.Context, layers int, dc dp.Cluster, do dp.Options, progress *ilpProgress) {
	do.Progress = nil
	o.allMeshes = o.meshes(dc)
	if jobs := o.oneDevice(); len(jobs) > 0 {
		o.solveLayers(jobs, progress)
	}
	for ctx.Err() == nil {
		opt, err := o.optimisticPlan(ctx, layers, dc, do)
		if err != nil {
			return // no plan even optimistically: the composed DP says why
		}
		res, err := dp.Solve(ctx, layers, dc, o, do)
		within := err == nil && res.Time <= opt.Time*(1+refineTolerance)
		jobs := o.unsolved(opt, within)
		if len(jobs) == 0 {
			return
		}
		o.solveLayers(jobs, progress)
	}
}
