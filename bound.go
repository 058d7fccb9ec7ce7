package autopar

import (
	"cmp"
	"context"
	"fmt"
	"math"
	goruntime "runtime"
	"slices"

	"github.com/autopar/autopar/dp"
	"github.com/autopar/autopar/ir"
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
	kb   []float64 // per value of the layer's graph: its sharding.KernelBounds
	ok   bool
}

func (o *oracle) boundOf(sg *stageGraph, s mesh.Submesh, l mesh.LogicalShape) boundCost {
	lm, err := mesh.NewLogicalMesh(o.c, s, l[0], l[1])
	if err != nil {
		return boundCost{}
	}
	if sg.bounder == nil {
		if sg.bounder, err = sharding.NewBounder(sg.g, sharding.Options{Cluster: o.c}); err != nil {
			return boundCost{}
		}
	}
	kb := sg.bounder.Bounds(lm)
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
	return boundCost{cost: c, kb: kb, ok: true}
}

// redoBound is a lower bound on the time a recomputing stage holding layer k on (s, l)
// spends per micro-batch recomputing layer k's forward: the sum of the kernel bounds of the
// layer's forward values that its backward reads and no other layer does (layerMem.redo),
// which both recomputing ways run again (memFloor's comment says why). remat.go prices a
// recomputed op at its strategy's Compute + Comm, at least its kernel bound.
func (o *oracle) redoBound(k int, s mesh.Submesh, l mesh.LogicalShape) float64 {
	m := o.memOf(k)
	mk := meshKey{s, l}
	if t, ok := m.redoTime[mk]; ok {
		return t
	}
	t := 0.0
	if _, ok := o.layerBound(k, s, l); ok {
		kb := o.bounds[solveKey{o.infos[k].sg.hash, s, l}].kb
		for _, id := range m.redoIDs {
			t += kb[id]
		}
	}
	m.redoTime[mk] = t
	return t
}

// boundedRange completes c, the optimistic price of layers [start, end) on (s, l) summed
// over its layers (some priced by their bounds, layerBound), into the ways the range can
// run, each a lower bound on that way of the range's solved cost (time and memory with any
// number of micro-batches in flight): plainly, holding the plain floors (memFloors; the
// solved layers' own activations are no proven floor of the range's and are left out);
// recomputing, slower by every layer's redoBound, holding once the recomputing floor and
// nothing per micro-batch. Recomputation's mode picks which ways the DP sees, as costFor does for
// a solved stage. Before the recomputing way had its own price, a bounded range ran under
// RematAuto as fast as plainly with the lesser floor of the two, once: a micro-batch
// count whose stages could only fit recomputing looked as fast as one that ran plainly.
func (o *oracle) boundedRange(c dp.StageCost, start, end int, s mesh.Submesh, l mesh.LogicalShape) dp.StageCost {
	f := o.memFloors(start, end, s.NumDevices())
	if soundMemory {
		if w := o.boundWeights(start, end, s, l); !math.IsNaN(w) {
			c.WeightBytes = w // the solved layers' own weights bound nothing (floored)
		}
	}
	plain := c
	plain.ActBytes, plain.OnceBytes = f.inFlight, f.plain-f.inFlight // Memory(1) = W + f.plain
	if o.remat == RematNone {
		return o.peakRaised(plain, start, end, s, l, true)
	}
	r := c
	r.ActBytes, r.OnceBytes, r.Recompute = 0, f.remat, true
	for k := start; k < end; k++ {
		r.Time += o.redoBound(k, s, l)
	}
	if o.remat == RematFull {
		return o.peakRaised(r, start, end, s, l, true)
	}
	plain.Remat = []dp.StageCost{r}
	return o.peakRaised(plain, start, end, s, l, true)
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
// stage's mesh has not run, marking them in o.solved; layers of one structure (one solve
// key) once, as they share the solve. Not all of them: the cheaper half by
// solveEstimate (at least one per core), since the cheap solves may already show that the
// plan loses and spare the dear ones — an ILP on a two-dimensional mesh has several times
// the variables of a one-dimensional one and takes about ten times as long. With
// cheapOnly (the plan found is already within refineTolerance), none on a two-dimensional
// mesh: the cheap ones still buy a better plan where they can.
func (o *oracle) unsolved(p *dp.Result, cheapOnly bool) []job {
	var jobs []job
	seen := map[solveKey]bool{} // layers of one structure (a transformer's middle ones) share a solve
	for _, st := range p.Stages {
		for k := st.Start; k < st.End; k++ {
			if o.isSolved(k, st.Submesh, st.Logical) || o.firstSolved(st.Start, k, st.Submesh, st.Logical) || cheapOnly && meshFactor(st.Logical) > 4 {
				continue
			}
			if st.Start == 0 && o.reweighs(0, k) && o.remat != RematFull {
				// A first stage prices layer k at its own weight (pointsIn, weighedPrice):
				// that solve first; the layer's weight-1 solve only if it does not fit.
				sg := o.weighedLayer(k)
				key := solveKey{sg.hash, st.Submesh, st.Logical}
				r, ran := o.relaxed[key]
				if !ran && !seen[key] {
					seen[key] = true
					jobs = append(jobs, job{key: key, sg: sg, relaxed: true})
				}
				if !ran || r != nil && r.ok && r.exact {
					continue
				}
			}
			sg := o.infos[k].sg
			key := solveKey{sg.hash, st.Submesh, st.Logical}
			if !seen[key] {
				seen[key] = true
				jobs = append(jobs, o.layerJob(st, k, key)) // compose.go: a first stage's may be firstPoints
			}
		}
		if st.Start == 0 {
			jobs = o.unweighed(jobs, seen, st, cheapOnly)
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
		if j.relaxed {
			o.relaxed[j.key] = nil
		} else if !j.first {
			o.solved[j.key] = nil
		}
	}
	return jobs
}

// allSolved reports whether plan p runs only layers solved on their stage's mesh (unsolved
// lists none), and marks none: the marks unsolved made for the jobs it listed are taken
// back (each was absent: unsolved lists only keys that are neither solved nor relaxed).
func (o *oracle) allSolved(p *dp.Result) bool {
	jobs := o.unsolved(p, false)
	for _, j := range jobs {
		if j.relaxed {
			delete(o.relaxed, j.key)
		} else if !j.first {
			delete(o.solved, j.key)
		}
	}
	return len(jobs) == 0
}

// unweighed adds to jobs the solves at a first stage's weight (weighedLayer) of the later
// layers of st, a stage from layer 0, once each layer's own solve has run (solved, or
// relaxed): until then reweighed bounds its price from that solve, and where the
// optimistic plan keeps the stage after it, the layer is solved at the stage's weight,
// relaxed (without its memory rows), once.
func (o *oracle) unweighed(jobs []job, seen map[solveKey]bool, st dp.Stage, cheapOnly bool) []job {
	for k := st.Start + 1; k < st.End; k++ {
		if !o.reweighs(0, k) || o.remat == RematFull || cheapOnly && meshFactor(st.Logical) > 4 {
			continue
		}
		own := solveKey{o.infos[k].sg.hash, st.Submesh, st.Logical}
		if _, relaxed := o.relaxed[own]; !relaxed && !o.isSolved(k, st.Submesh, st.Logical) {
			continue
		}
		sg := o.weighedLayer(k)
		key := solveKey{sg.hash, st.Submesh, st.Logical}
		if _, ran := o.relaxed[key]; ran || seen[key] {
			continue
		}
		seen[key] = true
		jobs = append(jobs, job{key: key, sg: sg, relaxed: true}) // a bound is all lower needs (weighedPrice)
	}
	return jobs
}

// relaxedBudget is the memory budget of a relaxed solve: no memory row binds it.
const relaxedBudget = 1 << 62

// relaxes says whether the lazy search solves layer key relaxed before it solves it under
// the memory (solveRelaxed): on a two-dimensional mesh (its dear ILPs), once, unless
// every stage recomputes (RematFull: its solve has its own liveness).
func (o *oracle) relaxes(key solveKey) bool {
	_, tried := o.relaxed[key]
	return !tried && o.memory > 0 && o.remat != RematFull && meshFactor(key.logical) > 4
}

// solveRelaxed solves layer sg on (s, l) as solveStageBudget would, without the memory
// rows (issue 13, branch gptbig). The memory rows and the variables they hold only add
// constraints to the layer's ILP (the budget changes nothing else in the planner: plain or
// recomputing, the objective and strategies are the same), so the relaxation's optimum is
// at most the layer's in the ILP's own objective (w·t + u, w its weight) under every
// way the layer can run: a bound on the layer's price, in the sense of lower's layer
// sums, far tighter than layerBound's (it prices communication) and, where the memory
// binds, several times cheaper to solve: the memory rows make the root fractional
// (GPT-39B's middle layer on 8×8: 8 CPU s relaxed, 52 under 16 GiB, within 0.5 %).
// lower prices the layer by it until an optimistic plan runs the layer again; then the
// layer is solved under the memory. A relaxed plan that fits the memory is the solve under
// the memory (an optimum of the relaxation that is feasible for the constrained ILP is its
// optimum): exact is set and it serves as the layer's solve. Otherwise its price is the
// bound: the ILP's part of its cost as solved and the data instructions, which the ILP
// does not see, at their least price (dataBound, as layerBound takes them). Where the ILP
// prices some values' resharding once per consumer (sharding.ILPStats.PerEdgeValues, as
// on GPT-39B's layers) its objective exceeds a plan's cost, so the relaxation bounds the
// objective, not the cost: an approximation there, the caveat lower's sums of solved
// layers already carry (measured by TestRelaxedIsLower on moe-tiny, and 2.412 against
// 2.425 s on GPT-39B's middle layer on 8×8). A solve stopped by a limit proves nothing
// and gives no bound (ok false). TestRelaxedIsLower.
func (o *oracle) solveRelaxed(sg *stageGraph, s mesh.Submesh, l mesh.LogicalShape) *stageSolution {
	return o.solveRelaxedAt(sg, s, l, 0, 0)
}

// solveRelaxedAt is solveRelaxed at most iters of lp_solve's effort (0: the compile's),
// its ILP not given to lp_solve above noLP variables where positive (NoLPAbove).
func (o *oracle) solveRelaxedAt(sg *stageGraph, s mesh.Submesh, l mesh.LogicalShape, iters int64, noLP int) *stageSolution {
	lm, err := mesh.NewLogicalMesh(o.c, s, l[0], l[1])
	if err != nil {
		return &stageSolution{err: err}
	}
	opts := o.solveOptions(sg, s, l, relaxedBudget)
	if iters > 0 {
		opts.Iterations = iters
	}
	if noLP > 0 && !o.lpOnly {
		opts.NoLPAbove = noLP
	}
	o.solves.Add(1)
	res, err := o.traced(sg, s, lm, opts, "relaxed")
	if err != nil {
		return &stageSolution{err: err}
	}
	return o.relaxedOf(sg, lm, res)
}

// relaxedOf is solveRelaxedAt's solution from res, the layer's solve without memory rows.
func (o *oracle) relaxedOf(sg *stageGraph, lm *mesh.LogicalMesh, res *sharding.Result) *stageSolution {
	atomicMax(&o.maxVars, int64(res.ILP.Variables))
	if res.ILP.Status != "optimal" {
		return &stageSolution{}
	}
	sol := o.priced(sg, lm, res, false)
	if !sol.ok {
		return sol
	}
	if res.PeakMemory <= o.memory {
		res.Budget = o.memory
		sol.exact = true
		return sol
	}
	// The data instructions are priced after the ILP, which does not see them: the bound
	// takes their least price on any layout (dataBound, as layerBound does).
	mb, step := sg.dataTime(o.c, res)
	mbLow, stepLow := sg.dataBound(o.c, lm.Size())
	sol.cost.Time += mbLow - mb
	sol.cost.Step += stepLow - step
	sol.remats = nil
	return sol
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
			// No plan even optimistically: the composed DP says why, with the lean points
			// of every range (the optimistic memory is no proof: gpt-1.3b/4 at 16
			// micro-batches has a plan where it has none).
			o.markLean(nil)
			return
		}
		if o.cutoff > 0 && opt.Time >= o.cutoff {
			// The count's bound, raised by the layers solved so far, now loses to another
			// count's plan: the test searchAll's loses makes before a count, made again.
			o.outbid = true
			return
		}
		if o.memRefute(opt) {
			continue // a stage's peak floor raised its memory: plan again
		}
		o.markLean(opt)
		res, err := dp.Solve(ctx, layers, dc, o, do)
		within := err == nil && res.Time <= opt.Time*(1+refineTolerance)
		o.roundTrace("settle", opt, res)
		jobs := o.unsolved(opt, within)
		if len(jobs) == 0 {
			return
		}
		o.solveLayers(jobs, progress)
	}
}

// floored raises the memory of each way of c, the optimistic price of layers [start, end)
// on (s, l) from their solved layers (oracle.lower), to memFloors: with i micro-batches in
// flight a way holds at least the layers' weights spread perfectly (boundWeights) and its
// floor. The solved layers' own weights and activations, which lower sums and takes the
// largest of, are those of each layer's fastest point, which may hold its weights
// replicated where the range, short of memory, shards them (and its activations differ
// with them): they bound nothing, and under soundMemory each way's memory is the floors
// alone, as boundedRange's. Off by default: kept, they act as a guess of the range's
// memory that the search's cost depends on (docs/DECISIONS.md, branch gpt26: GPT-2.6B/8's
// one-stage [0,8) on 4×2 held 17.9 GB optimistically against the 16 GiB device, where
// its range ILP has a plan at 16.0 GiB; TestLowerMemoryIsLower).
func (o *oracle) floored(c dp.StageCost, start, end int, s mesh.Submesh, l mesh.LogicalShape) dp.StageCost {
	f := o.memFloors(start, end, s.NumDevices())
	weights := o.boundWeights(start, end, s, l)
	if math.IsNaN(weights) {
		return o.peakRaised(c, start, end, s, l, false)
	}
	return o.peakRaised(eachWay(c, func(w *dp.StageCost) {
		inFlight, first := f.inFlight, f.plain
		if w.Recompute {
			inFlight, first = 0, f.remat
		}
		if soundMemory {
			w.WeightBytes, w.ActBytes, w.OnceBytes = weights, inFlight, first-inFlight
			return
		}
		w.ActBytes = max(w.ActBytes, inFlight)
		w.OnceBytes = max(w.OnceBytes, weights+first-w.WeightBytes-w.ActBytes)
	}), start, end, s, l, false)
}

// soundMemory makes a range's optimistic memory its floors alone (floored, boundedRange), a
// lower bound on every plan of the range; off, the solved layers' fastest points' weights
// and activations raise it, which is no bound. On since branch sound: the optimistic plan's
// stages get peak floors (memRefute), which refute the memory-bound ranges the guess used
// to skip (gpt-760m/2 went past the 30 s cap with the floors alone; BENCHMARKS.md, "gpt26"
// and "sound"). Off only in tests and measurements (flag -sound-memory=false).
var soundMemory = true

// boundWeights is the sum of the weights of layers [start, end) spread perfectly over
// (s, l) (layerBound), as memFloors' floors are taken against; NaN where a layer has no
// bound (its mesh cannot be built).
func (o *oracle) boundWeights(start, end int, s mesh.Submesh, l mesh.LogicalShape) float64 {
	weights := 0.0
	for k := start; k < end; k++ {
		b, ok := o.layerBound(k, s, l)
		if !ok {
			return math.NaN()
		}
		weights += b.WeightBytes
	}
	return weights
}

// eachWay is c with f applied to each of its ways, the plain one and every recomputing
// one; the recomputing ways are copied first, as c's may be shared with the oracle's.
func eachWay(c dp.StageCost, f func(*dp.StageCost)) dp.StageCost {
	f(&c)
	if len(c.Remat) > 0 {
		c.Remat = slices.Clone(c.Remat)
		for i := range c.Remat {
			f(&c.Remat[i])
		}
	}
	return c
}

// stepRaised is c with each way's step part raised so that weight·t + u is at least total.
func stepRaised(c dp.StageCost, weight, total float64) dp.StageCost {
	return eachWay(c, func(x *dp.StageCost) { x.Step = max(x.Step, total-weight*x.Time) })
}

// layerMem is what bounds from below, without an ILP, the memory of a stage that holds a
// layer, whatever its sharding and recomputation (memFloor). All in bytes of whole
// tensors; a device holds at least 1/n of each on a mesh of n devices (shards divide
// exactly).
type layerMem struct {
	params float64 // the layer's params, once
	// inner is the most bytes of the layer's own values (ops of the layer, leaves and
	// values brought in from other layers left out) alive at once under the sharding
	// pass's liveness (a value from its op to its last reader in the layer).
	inner float64
	// redo is the bytes of the layer's forward values that the backward reads and that no
	// op of another layer reads: recomputing layer by layer (remat.go) recomputes every
	// one of them in the layer's segment, in any stage that holds the layer.
	redo float64
	// saved is the bytes of the layer's forward values that an op of the layer after the
	// step's last forward op reads: in any stage that holds the layer, they are all alive
	// once the stage's forward has run (a stage's graph keeps the step's order), with
	// those of the stage's other layers.
	saved float64
	// redoIDs are those values and the forward values of the layer, read by no other
	// layer, that they read, in the layer's graph: what both recomputing ways run again
	// (memOf); redoTime their redoBound per mesh.
	redoIDs  []ir.ValueID
	redoTime map[meshKey]float64
	// own are the layer's own values as the step numbers them, with, each, the last op of
	// the layer that reads it (itself if none): their live ranges within the layer, which
	// rangeLive extends to the readers of the range's other layers.
	own, last []ir.ValueID
	// weights are the params and optimizer state the layer's graph reads, as the step
	// numbers them (layers may share one: a tied embedding), with their bytes once.
	weights []ir.ValueID
}

// memOf returns layer k's layerMem, made once per oracle.
func (o *oracle) memOf(k int) *layerMem {
	li := o.infos[k]
	if li.mem != nil {
		return li.mem
	}
	if o.localOnly == nil {
		// localOnly marks the step's values that no op of another layer reads.
		o.localOnly = make([]bool, len(o.step.Values))
		for i := range o.step.Values {
			o.localOnly[i] = true
		}
		for i := range o.step.Values {
			for _, a := range o.step.Values[i].Args {
				if o.lay.Of[a] != o.lay.Of[i] {
					o.localOnly[a] = false
				}
			}
			if o.fwd[i] && !o.step.Values[i].Op.IsLeaf() {
				o.lastFwd = ir.ValueID(i)
			}
		}
	}
	g := li.sg.g
	n := len(g.Values)
	m := &layerMem{redoTime: map[meshKey]float64{}}
	own := make([]bool, n) // an op of layer k
	fwd := make([]bool, n) // of them, a forward op
	last := make([]int, n) // last reader in g
	step := make([]ir.ValueID, n)
	for i := range g.Values {
		v := &g.Values[i]
		last[i] = i
		if v.Op == ir.OpParam {
			m.params += float64(v.Type.Bytes())
		}
		id, ok := o.step.Lookup(v.Name)
		if ok && (v.Op == ir.OpParam || v.Op == ir.OpState) {
			m.weights = append(m.weights, id)
		}
		if !ok || v.Op.IsLeaf() || o.step.Value(id).Op != v.Op || o.lay.Of[id] != k {
			continue
		}
		own[i], fwd[i], step[i] = true, o.fwd[id], id
	}
	readBwd := make([]bool, n)  // read by an own op outside the forward
	readLate := make([]bool, n) // read by an own op after the step's last forward op
	for i := range g.Values {
		for _, a := range g.Values[i].Args {
			last[a] = max(last[a], i)
			if own[i] && !fwd[i] {
				readBwd[a] = true
			}
			if own[i] && step[i] > o.lastFwd {
				readLate[a] = true
			}
		}
	}
	diff := make([]float64, n+1)
	for i := range g.Values {
		if !own[i] {
			continue
		}
		b := float64(g.Values[i].Type.Bytes())
		diff[i] += b
		diff[last[i]+1] -= b
		lastStep := step[i]
		if own[last[i]] {
			lastStep = step[last[i]]
		}
		m.own, m.last = append(m.own, step[i]), append(m.last, lastStep)
		if fwd[i] && readBwd[i] && o.localOnly[step[i]] {
			m.redo += b
		}
		if fwd[i] && readLate[i] {
			m.saved += b
		}
	}
	// The values both ways recompute: those of redo, and the layer's forward values that
	// no other layer reads and that a recomputed one reads (remat.go's need, within one
	// segment, so none is a checkpoint), found from the last value back.
	redone := make([]bool, n)
	for i := n - 1; i >= 0; i-- {
		if !own[i] || !fwd[i] || !o.localOnly[step[i]] || !readBwd[i] && !redone[i] {
			redone[i] = false
			continue
		}
		redone[i] = true
		for _, a := range g.Values[i].Args {
			redone[a] = true // read by a recomputed op: recomputed too if it is the layer's own forward
		}
	}
	for i := range n {
		if redone[i] {
			m.redoIDs = append(m.redoIDs, ir.ValueID(i))
		}
	}
	cur := 0.0
	for t := range n {
		cur += diff[t]
		m.inner = max(m.inner, cur)
	}
	li.mem = m
	return m
}

// memFloor is what bounds from below, without an ILP, the memory of a stage holding a
// range of layers besides its weights (dp.StageCost.WeightBytes, at least the layers'
// weights spread perfectly: params twice, optimizer state), whatever its sharding.
type memFloor struct {
	// plain: run plainly, with one micro-batch in flight; inFlight: each further one.
	plain, inFlight float64
	// remat: recomputing, either way, with any number of micro-batches in flight.
	remat float64
}

// memFloors is the memFloor of layers [start, end) on a mesh of devices devices.
// boundedRange gives it to a range it prices by bounds.
//
// Why it holds, for a stage's sharding solve (stageSolution.cost) with params P, state S
// and gathered copies G per device, weights W = 2P+S+G: its peak is at least P+S+G (held
// throughout) plus, at any point, the layer's own values alive there, each at 1/n of its
// bytes or more, so peak ≥ P+S+G+inner/n; and, at the end of its forward, every layer's
// saved values, so peak ≥ P+S+G+Σ saved/n (inner below is the larger of the two). Run
// plainly it holds W + i·ActBytes with i micro-batches in flight, ActBytes =
// max(0, peak − W) ≥ inner/n − P: so W + ActBytes ≥ W + (inner/n − P), and ActBytes ≥
// inner/n − P_all, P_all the range's params undivided (P is at most that; P itself may be
// a replica, so inner/n − P is a floor of the first micro-batch only, where the weights'
// own floor makes up for P). Recomputing (either way,
// remat.go) it holds max(W + kept, the recomputing peak) plus kept per further
// micro-batch (sharding.Recompute's liveness): every value of redo is recomputed in its
// layer's segment, whose recomputation runs as one block before the first backward op
// that reads it, and each stays alive until its backward read, after the block; so at the
// block's end the peak is at least P+S+G+redo/n, and the stage holds at least
// W + (redo/n − P). In all three P and S are taken spread perfectly over the range's
// devices, the least they can be, and the largest layer's inner or redo is taken; never
// below 0. inner is also at least rangeLive: the range's own values alive together in
// the stage (one layer's backward while the earlier layers' saved values and the later
// ones' gradients, kept for the update, are alive), which the layers' inner and saved
// miss. The bound the floors complete sums its layers' weights, a param that two layers
// read once per layer: so the floors are taken against that sum (summed), the params and
// state counted once (held): W_bound + plain = (held + inner)/n ≤ P+S+G+inner/n.
func (o *oracle) memFloors(start, end, devices int) memFloor {
	n := float64(devices)
	r := o.rangeMem(start, end)
	// A range's bound sums its layers' weights (summed/n, a shared param once a layer):
	// the floors hold (held + inner)/n above the weights, less what that sum counts.
	// Each further micro-batch is taken to hold no more than the first (a lesser floor is
	// one too): where layers share a param, the first's floor is the smaller.
	plain := max(0, (r.held+r.inner-r.summed)/n)
	return memFloor{plain: plain, inFlight: min(plain, max(0, r.inner/n-r.params)), remat: max(0, (r.held+r.redo-r.summed)/n)}
}

// rangeMem is what memFloors reads of a range of layers, whatever its mesh, in bytes of
// whole tensors: inner is the largest of the layers' inner, the sum of their saved values
// and rangeLive; redo the largest layer's; held the params and optimizer state the range
// reads and params its params, each tensor once; summed the layers' weights
// (stageGraph.weights) summed, as the range's bound sums them.
type rangeMem struct{ inner, redo, held, params, summed float64 }

// rangeMem returns layers [start, end)'s rangeMem, made once per range.
func (o *oracle) rangeMem(start, end int) rangeMem {
	key := [2]int{start, end}
	if r, ok := o.ranges[key]; ok {
		return r
	}
	var r rangeMem
	saved := 0.0
	seen := map[ir.ValueID]bool{}
	for k := start; k < end; k++ {
		m := o.memOf(k)
		r.summed += float64(o.infos[k].sg.weights)
		r.inner = max(r.inner, m.inner)
		saved += m.saved
		r.redo = max(r.redo, m.redo)
		for _, id := range m.weights {
			if seen[id] {
				continue
			}
			seen[id] = true
			b := float64(o.step.Value(id).Type.Bytes())
			r.held += b
			if o.step.Value(id).Op == ir.OpParam {
				r.params += b
			}
		}
	}
	r.inner = max(r.inner, saved, o.rangeLive(start, end))
	if o.ranges == nil {
		o.ranges = map[[2]int]rangeMem{}
	}
	o.ranges[key] = r
	return r
}

// rangeLive is the most bytes of the own values of layers [start, end) (layerMem.own)
// alive at once, each from its op to its last reader among the ops of those layers, in the
// step's order (rangeMem keeps it). A stage holding the range keeps the step's order and
// holds every op of its layers, so each of those values is alive in it at least over that
// span (from the value's op to its last reader in the stage), and wherever the sweep finds
// a set of values alive together, they are alive together at the latest of their ops, a
// point of the stage: the stage's peak holds them all, at 1/n of their bytes or more. It
// is at least each layer's inner (the same spans, cut to the layer's readers) and the sum
// of their saved values (all alive at the step's last forward op), and more where one
// layer's backward runs while the others' saved values and the later layers' gradients,
// kept for the update, are alive.
func (o *oracle) rangeLive(start, end int) float64 {
	for k := start; k < end; k++ {
		o.memOf(k) // sets o.localOnly too
	}
	n := len(o.step.Values)
	last := make([]ir.ValueID, n)
	for k := start; k < end; k++ {
		m := o.infos[k].mem
		for j, id := range m.own {
			last[id] = m.last[j]
		}
	}
	in := func(id int) bool { l := o.lay.Of[id]; return l >= start && l < end }
	for i := range o.step.Values {
		if !in(i) || o.parts.Dead[i] {
			continue // a dead op is no op of the stage (oracle.stage)
		}
		for _, a := range o.step.Values[i].Args {
			if in(int(a)) && last[a] < ir.ValueID(i) {
				last[a] = ir.ValueID(i)
			}
		}
	}
	diff := make([]float64, n+1)
	for k := start; k < end; k++ {
		for _, id := range o.infos[k].mem.own {
			b := float64(o.step.Value(id).Type.Bytes())
			diff[id] += b
			diff[last[id]+1] -= b
		}
	}
	cur, most := 0.0, 0.0
	for t := range n {
		cur += diff[t]
		most = max(most, cur)
	}
	return most
}

// Refuting a range without its ILP (issue 13, branch rangebound).
//
// The optimistic price of a range (lower) sums its layers' prices; where it stays below
// the best plan found, exactly solves the range's ILP to learn that the range loses, and a
// whole network's range ILP on a mesh where the memory binds is among the dearest solves
// of the search (Wide-ResNet-1B's [0,8) on 1×4: 7,345 variables, lp_solve to its limit).
// Before that, refute prices such a range by the message-passing dual bound of its ILP
// without memory rows (sharding.FreeBound: a planner build and at most 300 sweeps, 0.1 s
// there), and the optimistic plan is made again; a range whose bound already loses is
// never solved.
//
// Why the bound is one of the range's price (dualRaised). The range's stage is priced by
// a solve of its ILP (stageSolution: plain, recomputing, or a fallback at the least
// footprint), which all share the ILP's candidates and objective (the budget and the
// recomputation marks change the memory rows only), so each such plan x has objective
// Obj(x) ≥ D, the dual bound. The ILP weighs x as the stage's price does, w·t + u with
// w = weightOf(start) (sharding/weights.go against stepPart), less the data instructions
// it does not see, when (1) no value's resharding is priced per consumer (PerEdgeValues
// 0: else Obj exceeds Result.Cost) but the leaves' — inputs and constants, whose Obj may
// exceed the cost too, yet not the least Obj: laid out replicated they reshard for free,
// so D is at most every plan's cost where each can be (LeafValues 0; docs/DECISIONS.md,
// "Round ten, rangedual") — and (2) no value read per micro-batch is also read by
// an update op or written back (weighsAsPriced: else the ILP weighs that resharding B and
// the price once). Then w·t + u = cost(x) + w·data_mb + data_step ≥ D + w·mbLow + stepLow
// (dataBound, as layerBound takes it), and recomputing only adds time (remat.go). The
// price is raised to that in w·t + u, t kept: each way's u to at least V − w·t.
//
// Only for a range that is the whole network: its stage is the plan's only one, whose
// step is exactly B·t + u (dp: Σ t + (B−1)·max t + u₀). A pipeline's first stage, when
// not the bottleneck, counts t + u, which a bound on B·t + u does not bound; a later
// stage's u is hidden (dp), so raising it changes nothing.

// dualApplies says whether refute prices layers [start, end) by its range ILP's dual
// bound: a range of several layers that is the whole network.
func (o *oracle) dualApplies(start, end int) bool {
	return start == 0 && end == o.lay.L && end-start >= 2
}

// refute computes the dual bound (rangeDual) of each stage of the optimistic plan opt
// that dualApplies to and whose range ILP has not run, once per stage, and reports
// whether one raised the stage's optimistic price: then the optimistic plan is made again
// before any range ILP is solved (exactly). target is what the bounds under the memory are
// asked to reach (lagRefute).
func (o *oracle) refute(opt *dp.Result, target float64) bool {
	raised := false
	for _, st := range opt.Stages {
		k := stageKey(st)
		if !o.dualApplies(st.Start, st.End) {
			continue
		}
		if e, ok := o.exactAt[k]; ok && e.exact {
			continue // priced by its range ILP already
		}
		if o.lagRefute(st.Start, st.End, st.Submesh, st.Logical, target) {
			if o.ctx.Err() != nil {
				return false
			}
			c := st.Cost
			c.Time -= st.Recv // the stage's own price, as the oracle gave it
			w := o.weight(st.Start)
			if r := o.lagRaised(c, st.Start, st.End, st.Submesh, st.Logical); w*r.Time+r.Step > (w*c.Time+c.Step)*(1+dualSlack) {
				raised = true
			}
		}
		if _, done := o.duals[k]; done {
			continue
		}
		if sg, err := o.stage(st.Start, st.End); err == nil {
			if r := o.relaxed[solveKey{sg.hash, st.Submesh, st.Logical}]; r != nil && r.ok && r.res != nil {
				continue // its solve without memory rows ran (restrict.go): rangeFloor prices it at least as high
			}
		}
		if o.perEdge(st.Start, st.End, st.Submesh, st.Logical) {
			continue // its bound would be void (rangeDual): not worth its planner build
		}
		v := o.rangeDual(st.Start, st.End, st.Submesh, st.Logical)
		if o.ctx.Err() != nil {
			return false // cancelled: no bound, and none recorded
		}
		o.duals[k] = v
		if w := o.weight(st.Start); v > w*(st.Cost.Time-st.Recv)+st.Cost.Step {
			raised = true
		}
	}
	return o.timeRefuteAll(opt, target) || raised // pipeline stages' floors on t (pipefloor.go)
}

// perEdge reports whether a solve of a layer of [start, end) on (s, l) priced some
// value's resharding per consumer (sharding.ILPStats.PerEdgeValues): the range's ILP
// then does too, as the layer's values keep their consumers there, and its dual bound
// would be void (GPT-2.6B's whole network on 2×4 and 4×2: 418 such values). A guess
// that only spares work: rangeDual checks the range's own count.
func (o *oracle) perEdge(start, end int, s mesh.Submesh, l mesh.LogicalShape) bool {
	if o.layerInfos() == nil {
		return false
	}
	for k := start; k < end; k++ {
		key := solveKey{o.infos[k].sg.hash, s, l}
		for _, p := range o.points[key] {
			if p.res != nil && p.res.ILP.PerEdgeValues > 0 {
				return true
			}
		}
		if r := o.relaxed[key]; r != nil && r.res != nil && r.res.ILP.PerEdgeValues > 0 {
			return true
		}
	}
	return false
}

// dualSlack is the relative margin taken off a dual bound before it prices a range: the
// bound and the plan's price are sums of the same costs in other orders (about 1e-15
// relative apart); lp_solve's gaps only make its answers dearer.
const dualSlack = 1e-9

// rangeDual is a lower bound, in w·t + u (w = weight(start)), on every price of layers
// [start, end) on (s, l) that a solve of its range ILP gives, plain or recomputing (see
// above); −Inf when there is none (the ILP weighs otherwise than the price, or the bound
// failed). Where the certificate closed and its plan fits the memory, the bound is the
// range ILP's answer (sharding.FreeDual.Answer): it is kept as the range's solve, as
// solveStageBudget would have priced it, so that the range is not solved again.
func (o *oracle) rangeDual(start, end int, s mesh.Submesh, l mesh.LogicalShape) float64 {
	none := math.Inf(-1)
	sg, err := o.stage(start, end)
	if err != nil || !sg.weighsAsPriced() {
		return none
	}
	lm, err := mesh.NewLogicalMesh(o.c, s, l[0], l[1])
	if err != nil {
		return none
	}
	n := float64(lm.Size())
	if o.memory > 0 && float64(sg.weights)/n > pruneFactor*float64(o.memory) {
		return none // priced as pruned, not solved (solveStageBudget)
	}
	opts := o.solveOptions(sg, s, l, o.memory)
	var d sharding.FreeDual
	bound := func() string {
		d, err = sharding.FreeBound(o.ctx, sg.g, lm, opts)
		if err != nil {
			return fmt.Sprintf("%q", err.Error())
		}
		return fmt.Sprintf("bound %.6g s closed %v answer %v per-edge %d leaves %d sweeps %d", d.Bound, d.Closed, d.Answer != nil, d.PerEdgeValues, d.LeafValues, d.Sweeps)
	}
	if stageTrace != nil {
		stageTrace(fmt.Sprintf("B%d,%s,%.8s,%dh%dd,%dx%d,%.2f,dual", o.mb, sg.g.Name, sg.hash, s.Hosts, s.Devices, l[0], l[1],
			float64(o.memory)/(1<<30)), bound)
	} else {
		bound()
	}
	if dualTrace != nil {
		dualTrace(sg, s, l, d, err)
	}
	if err != nil {
		return none
	}
	if key := (solveKey{sg.hash, s, l}); d.Answer != nil && o.remat != RematFull {
		if _, ok := o.solved[key]; !ok {
			// solveStageBudget's first solve, plain under the memory, answered: its price
			// (whatever the bound's use below: the answer is Solve's). It is the range's
			// solve without memory rows too (the certificate's plan, which fits), so
			// restrictStage's rangeRelaxed finds it there instead of solving it again.
			o.solves.Add(1)
			atomicMax(&o.maxVars, int64(d.Answer.ILP.Variables))
			sg.addData(o.c, d.Answer)
			sol := o.priced(sg, lm, d.Answer, false)
			o.solved[key] = sol
			if _, ran := o.relaxed[key]; !ran && sol.ok {
				relaxed := *sol
				relaxed.exact = true
				o.relaxed[key] = &relaxed
			}
		}
	}
	if d.PerEdgeValues > 0 || d.LeafValues > 0 || math.IsNaN(d.Bound) || math.IsInf(d.Bound, 0) {
		return none
	}
	mb, step := sg.dataBound(o.c, lm.Size())
	return d.Bound - dualSlack*math.Abs(d.Bound) + o.weight(start)*mb + step
}

// dualTrace, set by tests and benchmarks only, sees every range dual bound computed.
var dualTrace func(sg *stageGraph, s mesh.Submesh, l mesh.LogicalShape, d sharding.FreeDual, err error)

// dualRaised is c, the optimistic price of layers [start, end) on (s, l), with each way's
// step part raised so that w·t + u is at least the range's dual bound where refute
// computed one (rangeDual).
func (o *oracle) dualRaised(c dp.StageCost, start, end int, s mesh.Submesh, l mesh.LogicalShape) dp.StageCost {
	v, ok := o.duals[rangeKey{start, end, s, l}]
	if !ok || math.IsInf(v, -1) {
		return c
	}
	return stepRaised(c, o.weight(start), v)
}

// weighsAsPriced reports whether the stage's ILP weighs every cost as the stage's price
// does (sharding/weights.go against stepPart and perStep): it weighs each resharding of a
// value read per micro-batch (not a param or state) B, where the price counts the one into
// an update op, or written back (slot −1), once per step. With no such value, or B ≤ 1
// (every weight 1), the two agree.
func (sg *stageGraph) weighsAsPriced() bool {
	if sg.mb <= 1 {
		return true
	}
	g := sg.g
	perMB := make([]bool, len(g.Values))
	once := make([]bool, len(g.Values))
	for id := range g.Values {
		for _, a := range g.Values[id].Args {
			if sg.once[id] {
				once[a] = true
			} else {
				perMB[a] = true
			}
		}
	}
	for _, u := range g.Updates {
		once[u.Value] = true
	}
	for id := range g.Values {
		if op := g.Values[id].Op; perMB[id] && once[id] && op != ir.OpParam && op != ir.OpState {
			return false
		}
	}
	return true
}

// Peak floors from the sharding pass's memory model (issue 13, branch sound).
//
// A range's optimistic memory is its floors (memFloors) over its layers' weights spread
// perfectly (soundMemory): a bound, but a weak one where one value dominates (a GPT's last
// layer holds its logits: 17.3 GiB at least on 1×2 at 16 micro-batches, against floors of
// a few). For the stages of an optimistic plan (memRefute) the range's own graph is
// bounded by sharding.PeakFloors, each value at its least candidate layout over the memory
// model's live ranges, once per way it can run: plainly, recomputing as one segment
// (whole) and layer by layer (the stage's rematWay marks). Every price of the range that
// a solve gives (stageSolution: priced, remat.go's costs) holds Memory(1) ≥ that way's
// model peak (plain: W + max(0, peak − W); recomputing: W + kept + max(0, peak − W −
// kept), peak = PeakWith(marks)), and PeakFloors is at most that peak for every plan of
// the graph; more micro-batches in flight only add (ActBytes ≥ 0). So peakRaised, each
// way's OnceBytes raised until Memory(1) is at least its floor, keeps every way a lower
// bound. A way that recomputes without saying which (boundedRange's) takes the lesser of
// the two. A range priced without a solve (pruned: weights past pruneFactor × memory,
// hopeless) is over the memory either way. TestPeakFloorsAreLower.

// peakRaised is c, a price of layers [start, end) on (s, l), with each way's memory
// raised to its peak floor where memRefute computed one. either: a recomputing way
// without Checkpoints stands for either recomputation (boundedRange's), else for the
// whole stage as one segment (withRemat's).
func (o *oracle) peakRaised(c dp.StageCost, start, end int, s mesh.Submesh, l mesh.LogicalShape, either bool) dp.StageCost {
	f, ok := o.peaks[rangeKey{start, end, s, l}]
	if !ok {
		return c
	}
	return eachWay(c, func(w *dp.StageCost) {
		floor := f[0]
		switch {
		case w.Recompute && w.Checkpoints:
			floor = f[2]
		case w.Recompute && either:
			floor = min(f[1], f[2])
		case w.Recompute:
			floor = f[1]
		}
		w.OnceBytes = max(w.OnceBytes, floor-w.WeightBytes-w.ActBytes)
	})
}

// peakFloors computes and keeps the peak floors of layers [start, end) on (s, l), and
// reports whether it did (false: kept already, or the range's graph or mesh failed).
func (o *oracle) peakFloors(start, end int, s mesh.Submesh, l mesh.LogicalShape) bool {
	k := rangeKey{start, end, s, l}
	if _, ok := o.peaks[k]; ok {
		return false
	}
	if o.peaks == nil {
		o.peaks = map[rangeKey][3]float64{}
	}
	o.peaks[k] = [3]float64{} // no floor (0) unless computed below
	sg, err := o.stage(start, end)
	if err != nil {
		return false
	}
	lm, err := mesh.NewLogicalMesh(o.c, s, l[0], l[1])
	if err != nil {
		return false
	}
	marks := []*sharding.Recompute{nil, sg.remat.whole.marks, sg.remat.layers.marks}
	f, err := sharding.PeakFloors(o.ctx, sg.g, lm, o.solveOptions(sg, s, l, o.memory), marks)
	if err != nil {
		return false
	}
	o.peaks[k] = [3]float64{float64(f[0]), float64(f[1]), float64(f[2])}
	return true
}

// memRefute computes the peak floors of the stages of the optimistic plan opt (once per
// range), and reports whether one raised the memory of the way opt runs the stage in:
// then the optimistic plan is made again, as after refute. Only under a memory budget,
// and for stages whose range ILP has not priced them.
func (o *oracle) memRefute(opt *dp.Result) bool {
	if o.memory <= 0 || !peakFloorsOn {
		return false
	}
	raised := false
	for _, st := range opt.Stages {
		k := stageKey(st)
		if e, ok := o.exactAt[k]; ok && e.exact {
			continue
		}
		if !o.peakFloors(st.Start, st.End, st.Submesh, st.Logical) {
			continue
		}
		c := st.Cost
		if r := o.peakRaised(c, st.Start, st.End, st.Submesh, st.Logical, true); r.Memory(1) > c.Memory(1) {
			raised = true
		}
	}
	return raised
}

// peakFloorsOn: memRefute computes peak floors (off only to measure without them).
var peakFloorsOn = true
