package autopar

import (
	"context"
	"errors"
	"math"
	"slices"

	"github.com/autopar/autopar/dp"
	"github.com/autopar/autopar/ilp"
	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/mesh"
)

// Composed stages priced by their own plan (issue 13, the Wide-ResNet rows).
//
// The fast search's exactly (compile.go) re-prices the stages the DP chose by their range
// ILPs. A range of several layers is one ILP over all of them: for a Wide-ResNet on 2×2
// (the whole network in one stage) 47–73k variables that lp_solve does not finish within
// its 30 s limit, at every micro-batch count, after which the stage has no price at all.
// Yet the composition the DP chose it by is a plan of that range: each layer's solved
// strategies (compose.go's points). restrictStage solves the range ILP restricted to those
// strategies (sharding.Options.Restrict: every node keeps the strategies its layer chose,
// merging and fusion as in the range ILP), which is small, and prices the stage by it: the
// price of a real plan of the range, as the range runs it (memory rows, recomputation and
// the data instructions included), so never below the range ILP's optimum. Its exactAt
// entry is marked inexact, so that the optimistic plan still bounds the range from below.
//
// exactly accepts a plan with such a stage when it is within restrictTolerance (1%) of
// the optimistic bound. Otherwise, when the optimistic plan runs a restricted stage,
// openRestricted solves that stage's full range ILP, as exactly did before for every
// stage: the cheaper of the two prices the stage from then on, final, and a range ILP
// without a plan (lp_solve's limit) no longer leaves the stage without a price. unrestrict
// does the same for the plan's stages when exactly's rounds end without either proof.
// restrictStage prices layers [start, end) on (s, l) by the plan its composition chose,
// and reports whether it did: ranges of one layer, ranges whose layers' ILPs have fewer
// than restrictVars variables, compositions with a pruned layer, ranges already solved by
// their range ILP and the search after unrestrict are solved by their range ILPs instead.
func (o *oracle) restrictStage(start, end int, s mesh.Submesh, l mesh.LogicalShape) bool {
	k := rangeKey{start, end, s, l}
	if _, ok := o.restricted[k]; ok {
		return true
	}
	if e, ok := o.exactAt[k]; ok && e.exact {
		return false // solved by its range ILP already (openRestricted)
	}
	sg, c := o.restrictable(k)
	if sg == nil {
		return false
	}
	// Each layer's points on (s, l): the one the composition chose first, then the others
	// (the fastest, the memory-lean ones), whose strategies the restricted ILP may mix
	// under the range's own memory rows.
	pts := make([][]layerPoint, len(c.points))
	for j, p := range c.points {
		pts[j] = []layerPoint{p}
		for _, q := range o.points[solveKey{o.infos[start+j].sg.hash, s, l}] {
			if q.res != nil && q.res != p.res {
				pts[j] = append(pts[j], q)
			}
		}
	}
	// The range's own ILP without its memory rows (solveRelaxed, capped): where its plan
	// fits, that is the range's solve and nothing is restricted; otherwise it bounds the
	// one-stage plan (rangeFloor) and its strategies join the layers' below.
	var r *stageSolution
	if restrictRelaxed {
		r = o.rangeRelaxed(sg, s, l)
	}
	if r != nil && r.exact {
		return false
	}
	names := map[ir.ValueID][]string{}
	if r != nil {
		for i := range sg.g.Values {
			names[ir.ValueID(i)] = []string{r.res.Strategies[i].Name}
		}
	}
	for i := range sg.g.Values {
		v := &sg.g.Values[i]
		for j := range c.points {
			// The op in the layer that computes it (a value another layer computes is an
			// input leaf there) or the leaf (param, state, input) that layer reads.
			lg := o.infos[start+j].sg.g
			if id, ok := lg.Lookup(v.Name); ok && lg.Value(id).Op == v.Op {
				for _, p := range pts[j] {
					if name := p.res.Strategies[id].Name; !slices.Contains(names[ir.ValueID(i)], name) {
						names[ir.ValueID(i)] = append(names[ir.ValueID(i)], name)
					}
				}
				break
			}
		}
	}
	sol := o.solveStageOpts(sg, s, l, o.memory, nil, nil, names, 0, restrictIterations)
	if restrictIterations > 0 && errors.Is(sol.err, ilp.ErrTimeout) {
		sol = o.solveStageBudget(sg, s, l, o.memory, nil, nil, names) // no plan at the cap: as before
	}
	if sol.err != nil || !sol.ok || sol.res == nil {
		return false
	}
	o.restricted[k] = sol
	o.exactAt[k] = composedCost{cost: sol.costFor(o.remat), ok: true} // a plan's price, not the range's least
	return true
}

// restrictable is the range graph of k and its composition when restrictStage would price
// k by its restricted plan (once its relaxed solve does not fit): a range of several layers,
// not yet restricted or solved, whose layers' points compose it and whose layers' ILPs
// have restrictVars variables or more; nil otherwise.
func (o *oracle) restrictable(k rangeKey) (*stageGraph, composedCost) {
	c, ok := o.composedAt[k]
	if o.noRestrict || k.end-k.start < 2 || !ok || !c.ok || len(c.points) != k.end-k.start {
		return nil, c
	}
	vars := 0
	for _, p := range c.points {
		if p.res == nil {
			return nil, c
		}
		vars += p.res.ILP.Variables
	}
	if vars < restrictVars {
		return nil, c // the range ILP is cheap: solve it
	}
	sg, err := o.stage(k.start, k.end)
	if err != nil {
		return nil, c
	}
	return sg, c
}

// rangeRelaxed is the solve of the range graph sg on (s, l) without its memory rows
// (bound.go, solveRelaxed) at most restrictRelaxIterations of lp_solve's effort, run once
// per solve key: nil when it gave no bound (a limit). Where its plan fits the memory it is
// the range's solve under the memory too (exact), and is kept as such (o.solved). The
// certificate (passes/sharding certify.go) usually answers it without lp_solve: the
// memory rows are what makes Wide-ResNet's range ILPs dear (30 s to lp_solve's limit on
// 2×4 and 4×2, 60 s and more of branch and bound on 1×8).
func (o *oracle) rangeRelaxed(sg *stageGraph, s mesh.Submesh, l mesh.LogicalShape) *stageSolution {
	key := solveKey{sg.hash, s, l}
	r, ran := o.relaxed[key]
	if !ran {
		noLP := 0
		if meshFactor(l) > 4 {
			noLP = rangeLPVars
		}
		r = o.solveRelaxedAt(sg, s, l, restrictRelaxIterations, noLP)
		o.relaxed[key] = r
		if _, solved := o.solved[key]; r.exact && !solved {
			o.solved[key] = r // the memory rows would not have bound it
		}
	}
	if r == nil || !r.ok || r.res == nil {
		return nil
	}
	return r
}

// restrictRelaxed: restrictStage solves the range without its memory rows first
// (rangeRelaxed); off only in tests of the restriction to the layers' points alone.
var restrictRelaxed = true

// rangeLPVars (a variable for its test): a range's relaxed solve (rangeRelaxed) on a
// two-dimensional mesh whose ILP has more variables than this and that the certificate
// does not answer is not given to lp_solve (sharding.Options.NoLPAbove), which it would start cold at
// restrictRelaxIterations: an error, as the limit it would reach. leanLPVars' evidence
// (GPT-15B/32: cold lp_solve at leanIterations never got through the LP root of a 2-D ILP
// of 16.9–28.1k variables) holds here: Wide-ResNet-6.8B/32's [0,4) on 4×4 (22,240
// variables, count 64) ran 3000 iterations to the limit, 1.2 CPU s for no bound, the only
// range relaxed solve of the Wide-ResNet rows that reached lp_solve (every other one the
// certificate answers). What a range's relaxed solve gives (a fit, strategies for the
// restricted ILP, rangeFloor) is the same as after that limit: nothing.
var rangeLPVars = leanLPVars

// restrictIterations caps lp_solve's effort on a restricted solve (restrictStage), with the
// Lagrangian search's best plan that fits as its incumbent (sharding.Options.Incumbent):
// the restricted plan prices a stage by a real plan of its range, an upper bound the search
// accepts only within restrictTolerance of the optimistic bound, so any plan that fits
// serves, and the best one lp_solve finds within the cap is never worse than the
// incumbent. Only where the cap leaves no plan at all is the restricted ILP solved at the
// compile's effort, as before. Wide-ResNet-4B/16's count 12 ran its restricted [0,8) on
// 4×4 (3,922 variables) to 110k iterations and 12k branch-and-bound nodes, 15 CPU s, and on
// 8×2 to 80k, 11.5 CPU s; every restricted solve of the finished Wide-ResNet rows is
// answered by the certificate. 0: no cap (tests).
var restrictIterations int64 = leanIterations

// restrictRelaxIterations bounds the relaxed solve of a restricted range by lp_solve's
// effort: a bound stopped by its limit proves nothing, and the restricted plan stands
// without it, as before.
const restrictRelaxIterations = leanIterations

// rangeFloor raises c, the optimistic price of layers [start, end) on (s, l), by the
// range's relaxed solve (rangeRelaxed) where one ran and the range is the whole step, a
// one-stage plan: its step is B·t + u (dp: Σ t + (B−1)·max t + u₀), and the relaxed ILP
// weighs every plan of the range, plain or recomputing (recomputation only adds time),
// at w·t + u with w = B (weightOf(0)), so its objective W bounds every plan's step from
// below. Each way of c keeps its t (a bound on t) and has u raised to W − B·t where that
// is more: B·t + u is then W or more, and no way's step falls below what c said. Not for
// a pipeline's stages, whose t the step reads at weights between 1 and B (from layer 0)
// or whose u it does not read at all. TestRangeFloorIsLower.
func (o *oracle) rangeFloor(c dp.StageCost, start, end int, s mesh.Submesh, l mesh.LogicalShape) dp.StageCost {
	if start != 0 || end != o.lay.L || o.mb < 1 {
		return c
	}
	sg, err := o.stage(start, end)
	if err != nil || sg.mb != o.mb {
		return c
	}
	r := o.relaxed[solveKey{sg.hash, s, l}]
	if r == nil || !r.ok || r.res == nil {
		return c
	}
	b := float64(o.mb)
	return stepRaised(c, b, b*r.cost.Time+r.cost.Step)
}

// unrestrict re-prices plan p's restricted stages by their full range ILPs (exactly's
// rounds ended without proving p within refineTolerance of the bound) and returns the
// cheaper plan: p's restricted stages are kept when the full solves find nothing cheaper,
// or when no plan of the range can beat the fastest plan known (beaten).
func (o *oracle) unrestrict(ctx context.Context, layers int, dc dp.Cluster, do dp.Options, p *dp.Result, progress *ilpProgress) *dp.Result {
	if p == nil {
		clear(o.restricted) // no plan: the exhaustive search of this count solves every range
		return nil
	}
	saved := map[rangeKey]*stageSolution{}
	for _, st := range p.Stages {
		if k, sol := o.pendingRestricted(st); sol != nil && !o.beaten(k) {
			saved[k] = sol // a beaten range's ILP cannot bring p under the plan known (beaten)
		}
	}
	if len(saved) == 0 {
		return p
	}
	for k := range saved {
		delete(o.restricted, k)
		delete(o.exactAt, k)
	}
	o.noRestrict = true
	res, err := o.recost(ctx, layers, dc, do, p, progress)
	o.noRestrict = false
	if err == nil && res.Time <= p.Time {
		return res
	}
	for k, sol := range saved {
		o.restricted[k] = sol
		o.exactAt[k] = composedCost{cost: sol.costFor(o.remat), ok: true}
	}
	return p
}

// pendingRestricted returns the key of stage st and, where st is priced by its restricted
// plan and not yet by its range ILP (openRestricted would solve it), that plan; nil
// otherwise.
func (o *oracle) pendingRestricted(st dp.Stage) (rangeKey, *stageSolution) {
	k := stageKey(st)
	if sol, ok := o.restricted[k]; ok && !o.exactAt[k].exact {
		return k, sol
	}
	return k, nil
}

// openRestricted solves by its full range ILP every stage of the optimistic plan opt that
// is priced by a restricted solve, and reports whether there was one: the optimistic plan
// bounds such a stage below its restricted price, and only the range ILP can say whether
// the range runs faster (exactly's rounds would otherwise re-price opt unchanged). A range
// ILP that gives no plan (lp_solve's limit), or a dearer one, leaves the restricted price as
// the range's, now final (exact), so that the optimistic plan moves on to other stages.
func (o *oracle) openRestricted(opt *dp.Result, progress *ilpProgress) bool {
	var jobs []job
	var keys []rangeKey
	for _, st := range opt.Stages {
		k, sol := o.pendingRestricted(st)
		if sol == nil {
			continue
		}
		sg, err := o.stage(st.Start, st.End)
		if err != nil {
			continue
		}
		keys = append(keys, k)
		if o.beaten(k) {
			continue // its restricted price final, as where its range ILP gives no plan
		}
		key := solveKey{sg.hash, st.Submesh, st.Logical}
		if _, ok := o.solved[key]; !ok {
			o.solved[key] = nil
			jobs = append(jobs, job{key: key, sg: sg})
		}
	}
	if len(keys) == 0 {
		return false
	}
	o.run(jobs, progress.more())
	for _, k := range keys {
		sg, _ := o.stage(k.start, k.end)
		c := o.exactAt[k]
		if sol := o.solved[solveKey{sg.hash, k.sub, k.logical}]; sol != nil && sol.ok && sol.res != nil && o.weighedAt(k, sol) <= o.weighedAt(k, o.restricted[k]) {
			delete(o.restricted, k)
			o.exactAt[k] = composedCost{cost: sol.costFor(o.remat), ok: sol.ok, exact: true}
			continue
		}
		c.exact = true
		o.exactAt[k] = c
	}
	return true
}

// beaten reports whether no plan of the whole-network range k can beat the fastest plan
// known (o.top, a plan of this or another count, searchAll), so that its range ILP, which
// openRestricted would solve, cannot change the compile's plan: its proven bound
// (rangeLeast) is above top. A one-stage plan's step is its stage's B·t + u, which that
// bound bounds from below; the range keeps its restricted price, a plan of it, as where
// its range ILP ends at lp_solve's limit, and every plan of this count through it is
// slower than top however it is priced. Wide-ResNet-4B/16's count 12: [0,8) on 4×4
// bounded at 56.92 s under the memory (lagRefute) against count 16's 56.449 s, its
// 46k-variable range ILP 30 s to lp_solve's limit for no plan (issue 13, round eleven,
// wres4e).
func (o *oracle) beaten(k rangeKey) bool {
	if !o.fast || o.top <= 0 || math.IsInf(o.top, 1) || !o.dualApplies(k.start, k.end) {
		return false
	}
	return o.rangeLeast(k) > o.top
}

// rangeLeast is the least B·t + u of any plan of the whole-network range k that the
// search has proven (−Inf: none): the highest of its Lagrangian bound under the memory,
// the lesser of its plain and recomputing ways (timefloor.go, lagRefute), its dual bound
// (bound.go, rangeDual) and its solve without memory rows (rangeFloor's) where the range's
// ILP weighs as its price does and prices each value's layouts once.
func (o *oracle) rangeLeast(k rangeKey) float64 {
	least := math.Inf(-1)
	if v, ok := o.lagDuals[k]; ok {
		least = max(least, min(v[0], v[1]))
	}
	if v, ok := o.duals[k]; ok {
		least = max(least, v)
	}
	if sg, err := o.stage(k.start, k.end); err == nil && sg.mb == o.mb && o.mb >= 1 && sg.weighsAsPriced() {
		// Not where the relaxed ILP prices a value's resharding per consumer: its objective
		// then bounds no plan's cost (bound.go, solveRelaxed's caveat).
		if r := o.relaxed[solveKey{sg.hash, k.sub, k.logical}]; r != nil && r.ok && r.res != nil && r.res.ILP.PerEdgeValues == 0 {
			least = max(least, float64(o.mb)*r.cost.Time+r.cost.Step)
		}
	}
	return least
}

// weighed is a stage's plain price as the stage ILPs weigh it, B·t + u.
func (o *oracle) weighed(sol *stageSolution) float64 {
	return float64(max(o.mb, 1))*sol.cost.Time + sol.cost.Step
}

// weighedAt is what openRestricted compares a stage's two plans of range k by: for a
// whole-network range (one stage, one micro-batch in flight) the least B·t + u of its ways
// (plain, recomputing) that fits the memory (+Inf: none), weighed elsewhere. Not the plain
// way alone there: a restricted plan whose plain way overflows is priced by its recomputing
// ways, and compared by its plain one it beat a range plan that fits plainly (GPT-2.6B/8 at
// 64 µb, [0,8) on 2×4: restricted 41.708 s plain, 57.583 s the least that fits, against the
// range ILP's 43.120 s that fits). A pipeline stage keeps the plain comparison: its
// micro-batches in flight are the DP's to choose (issue 13, round twelve, integral).
func (o *oracle) weighedAt(k rangeKey, sol *stageSolution) float64 {
	if !o.dualApplies(k.start, k.end) {
		return o.weighed(sol)
	}
	c := sol.costFor(o.remat)
	least := math.Inf(1)
	for _, w := range append([]dp.StageCost{c}, c.Remat...) {
		if w.Memory(1) <= float64(o.memory) {
			least = min(least, float64(max(o.mb, 1))*w.Time+w.Step)
		}
	}
	return least
}

// restrictVars is the least size, in its layers' ILP variables, of a range priced by its
// restricted plan; a smaller range ILP is solved as before. The 1 % acceptance trades
// plan quality for the range ILP's time, which only pays where that is dear: without the
// floor, mlp-tiny on 8 V100s (cmd/autopar's summary golden) took a restricted two-layer
// stage within 1 % of an optimistic bound that was itself 2 % above the plan the range
// ILPs find (245 against 240 µs), the bound's fused-kernel caveat. Wide-ResNet's ranges
// on 2-D meshes have 60–90k, on 1×2 and 1×4 10–14k; the tiny models' a few hundred.
var restrictVars = 10000

// restrictTolerance is how close to the optimistic bound a plan with a stage priced by its
// restricted plan must be for exactly to accept it without the stage's range ILP: the
// fast search's contract, a plan within 1% of the best (TestFastSearchMatchesExhaustive).
// A refinement of such a plan solves a range ILP of the whole stage (on Wide-ResNet 30 to
// 80 CPU s, often to lp_solve's limit without a plan); refining an exactly solved plan
// solves layers, hence refineTolerance there.
const restrictTolerance = 0.01

// tolerance is exactly's acceptance margin for plan p over the optimistic bound.
func (o *oracle) tolerance(p *dp.Result) float64 {
	for _, st := range p.Stages {
		if _, ok := o.restricted[stageKey(st)]; ok {
			return restrictTolerance
		}
	}
	return refineTolerance
}

// cheapFirst returns the stages of the incumbent best that are priced by their restricted
// plan on a one-dimensional mesh, when the optimistic plan opt would open (openRestricted)
// a restricted stage on a two-dimensional one; nil otherwise. Their range ILPs are cheap
// (GPT-1.3B/4's [0,8) on 1×4 recomputing: under a second) where opt's on 2×2 ran to
// lp_solve's 30 s limit, and the incumbent they price exactly may then be within the
// tolerance of the bound: exactly opens them first (issue 13, branch sound). Either way
// the search stays a bound-and-refine one: they are range ILPs the search may solve.
func (o *oracle) cheapFirst(opt, best *dp.Result) *dp.Result {
	if best == nil {
		return nil
	}
	dear := false
	for _, st := range opt.Stages {
		if _, sol := o.pendingRestricted(st); sol != nil && meshFactor(st.Logical) > 4 {
			dear = true
		}
	}
	if !dear {
		return nil
	}
	cheap := *best
	cheap.Stages = nil
	for _, st := range best.Stages {
		if _, sol := o.pendingRestricted(st); sol != nil && meshFactor(st.Logical) <= 4 {
			cheap.Stages = append(cheap.Stages, st)
		}
	}
	if len(cheap.Stages) == 0 {
		return nil
	}
	return &cheap
}

// memoryBound reports whether refining opt would solve a memory-bound range ILP: a stage of
// several layers that no range ILP has priced (exactAt, o.solved) and whose solve without
// memory rows ran and does not fit the memory (rangeRelaxed). Such an ILP is the search's
// dearest (Wide-ResNet-2B/8's [0,8) on 1×8: 23 CPU s at lp_solve's limit, twice; the LP
// root of GPT-2.6B/8's [0,8) on 4×2 is 1.24 % under its optimum, so only branch and bound
// closes it). exactly accepts an incumbent within restrictTolerance of the bound instead,
// the fast search's contract (issue 13, branch sound).
func (o *oracle) memoryBound(opt *dp.Result) bool {
	for _, st := range opt.Stages {
		if st.End-st.Start < 2 {
			continue
		}
		if e, ok := o.exactAt[stageKey(st)]; ok && e.exact {
			continue
		}
		sg, err := o.stage(st.Start, st.End)
		if err != nil {
			continue
		}
		key := solveKey{sg.hash, st.Submesh, st.Logical}
		if _, ok := o.solved[key]; ok {
			continue
		}
		if r := o.relaxed[key]; r != nil && r.ok && !r.exact {
			return true
		}
	}
	return false
}

// cheapStart returns the optimistic plan when exactly should re-cost it before the fast
// plan fast, its first incumbent; nil otherwise (issue 13, branch wres2b). That is when
// re-costing fast would solve a restricted range ILP (restrictStage) because the range's
// relaxed solve does not fit the memory (or gave no bound), while every stage of the
// optimistic plan, once those relaxed solves have raised its bound (rangeFloor), is
// already priced by a solve or by a relaxed solve that fits: its re-cost then solves no
// ILP, and the plan it gives may be within the tolerance of the bound, so that the
// memory-bound range is refuted by the bound (memoryBound) and never solved.
// Wide-ResNet-2B/8's count 16: fast runs [0,8) on 1×8 (its restricted ILP: 3 lp_solve
// calls, 2.2k B&B nodes, 4.3 CPU s, for 50.74 s), the optimistic plan [0,8) on 2×4, whose
// relaxed plan fits (0.2 s, 50.372 s, within 1 % of the bound). Only the order of the
// re-costs changes: exactly accepts a plan by the same tests, and re-costs fast as well
// where its rounds end unproven.
func (o *oracle) cheapStart(ctx context.Context, layers int, dc dp.Cluster, do dp.Options, fast *dp.Result) *dp.Result {
	if fast == nil || !restrictRelaxed || !o.dearStages(fast) {
		return nil
	}
	opt, err := o.optimisticPlan(ctx, layers, dc, do)
	if err != nil || !o.allSolved(opt) || o.dearStages(opt) {
		return nil
	}
	// opt runs no stage of fast that is dear (dearStages is by stage), so it is another plan.
	for _, st := range opt.Stages {
		sg, err := o.stage(st.Start, st.End)
		if err != nil {
			return nil
		}
		k := stageKey(st)
		_, restricted := o.restricted[k]
		sol, solved := o.solved[solveKey{sg.hash, st.Submesh, st.Logical}]
		if !o.exactAt[k].exact && !restricted && !(solved && sol != nil && sol.ok) {
			return nil // its re-cost would solve the range ILP
		}
	}
	return opt
}

// dearStages reports whether re-costing plan p would solve a restricted range ILP under
// the memory (restrictStage): a stage restrictable, whose relaxed solve, run here if it has
// not run (the re-cost runs it first anyway), does not fit or gave no bound.
func (o *oracle) dearStages(p *dp.Result) bool {
	dear := false
	for _, st := range p.Stages {
		k := stageKey(st)
		if _, ok := o.restricted[k]; ok || o.exactAt[k].exact {
			continue
		}
		sg, _ := o.restrictable(k)
		if sg == nil {
			continue
		}
		if r := o.rangeRelaxed(sg, st.Submesh, st.Logical); r == nil || !r.exact {
			dear = true
		}
	}
	return dear
}
