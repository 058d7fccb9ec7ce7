package autopar

import (
	"fmt"
	"math"

	"github.com/autopar/autopar/dp"
	"github.com/autopar/autopar/mesh"
	"github.com/autopar/autopar/passes/sharding"
)

// Time floors of pipeline stages under the memory (issue 13, round eleven, branch pipe).
//
// timefloor.go bounds a whole-network range's w·t + u, which is the step of a one-stage
// plan. A pipeline's step is Σ t + (B−1)·max t + u₀ (package dp): a stage after the first
// shows only its t, and the first its t and u apart, so a bound on w·t + u raises no part
// of a pipeline stage's price soundly (a plan may trade u for t, and t is what the DP
// multiplies by B−1). What a pipeline stage needs is a floor on t alone.
//
// timeRefute takes it from the range ILP weighed M·t + u (sharding.Options.Microbatches =
// timeWeight, M = 2²⁰), every value priced once per layout (sharding.MemoryBound): its
// Lagrangian bound under the device memory is at most M·t + u of every plan of the range
// that fits, so t ≥ Under/M − u/M. The once-per-step part u/M is dropped: it is at most
// 1e-6 of u (a GPT stage's u is seconds: 10 µs of t at 10 s of u; measured in DECISIONS,
// "pipe"). Which ways the floor raises is as lagRefute argues: the range's price comes from
// its ILP solved plainly under the memory and, only on a memory error, recomputing layer by
// layer (solveStageOpts). Where the bound decoded a plan that fits plainly (Fits), every way
// comes from a plain plan that fits: t ≥ the plain floor, recomputing ways also their
// recomputed time, at least Σ redoBound. Otherwise the plain way is bounded by the plain
// floor (the DP takes it only where its plain peak fits), and a recomputing way either
// comes from a plain plan that fits (the plain floor) or from the recomputing solve, whose
// plan fits its recomputing peak (sharding.Options.Recompute): its own Lagrangian bound,
// with those marks, bounds it. The recomputing floor is the lesser of the two plus Σ
// redoBound. Where the range's peak floor (memRefute) says no plan fits plainly, only the
// recomputing bound is asked for: the DP rejects the plain way whatever its time.
//
// Unlike timefloor's bound, the ILP is weighed otherwise than the range's own solve (M,
// not w). The candidates, ties and dominance serve any weight (dominance is exact for the
// objective it prunes under); follower merging orders a follower's exact matches, and
// picks its cheapest where none is exact, by the weighed cost, so where a group strategy is
// cut to its first matches (maxGroupStrategies) or a follower has no exact match the two
// ILPs may hold different plans. TestTimeFloorIsLower checks the floors against the range
// solves' plans on the small models. The floors are no better than MemoryBound's Under,
// which that test once found above a plan's price: the ILP then priced plans above
// Result.Cost, which objcost mended (DECISIONS, "pipe", "lagfix").

// timeWeight is M, the micro-batch weight of the floors' ILP: u/M is what the floor drops.
const timeWeight = 1 << 20

// timeRefute computes the time floors of layers [start, end) on (s, l) (see above), for a
// range of two or more layers that is not the whole network under RematAuto or RematNone,
// not pruned, and reports whether it did. Each Lagrangian search stops where its floor
// times B reaches target (the count's step then loses: Σ t + (B−1)·max t ≥ B·t); +Inf or
// 0: none. A search stopped so goes on, from the multiplier it reached (timeCut), when a
// later call asks a higher target of a floor still under it: a floor frozen at the first
// target it was asked for held GPT-39B/64's counts near their first cutoffs (DECISIONS,
// "Round twelve, pipefloor2").
func (o *oracle) timeRefute(start, end int, s mesh.Submesh, l mesh.LogicalShape, target float64) bool {
	k := rangeKey{start, end, s, l}
	_, done := o.timeFloors[k]
	cut := o.timeCuts[k]
	if done && (cut == nil || !(target > cut.target)) {
		return false // its searches ran to their end, or to this target already
	}
	if end-start < 2 || o.dualApplies(start, end) || o.remat == RematFull || o.memory <= 0 {
		return false
	}
	if o.timeFloors == nil {
		o.timeFloors, o.timeCuts = map[rangeKey][2]float64{}, map[rangeKey]*timeCut{}
	}
	if !done {
		none := math.Inf(-1)
		o.timeFloors[k] = [2]float64{none, none}
		cut = &timeCut{}
	}
	delete(o.timeCuts, k)
	sg, err := o.stage(start, end)
	if err != nil {
		return false
	}
	weighed := *sg
	weighed.mb = timeWeight
	if !weighed.weighsAsPriced() {
		return false
	}
	lm, err := mesh.NewLogicalMesh(o.c, s, l[0], l[1])
	if err != nil {
		return false
	}
	if float64(sg.weights)/float64(lm.Size()) > pruneFactor*float64(o.memory) {
		return false // priced as pruned, not solved (solveStageOpts)
	}
	opts := o.solveOptions(sg, s, l, o.memory)
	opts.Microbatches = timeWeight
	mb, _ := sg.dataBound(o.c, lm.Size())
	redo := 0.0
	for k := start; k < end && o.layerInfos() != nil; k++ {
		redo += o.redoBound(k, s, l)
	}
	floor := func(x float64) float64 {
		t := x / timeWeight
		return t - dualSlack*math.Abs(t) + mb
	}
	b := float64(max(o.mb, 1))
	aimed := target > 0 && !math.IsInf(target, 1)
	// run goes on with search x (or begins it) until b × (its floor + add) reaches the
	// target, and records what it proved in x.
	run := func(x *timeSearch, opts sharding.Options, kind string, add float64) bool {
		var enough func(sharding.MemoryDual) bool
		stopped := false
		if aimed {
			enough = func(d sharding.MemoryDual) bool {
				stopped = b*(floor(d.Under)+add) >= target
				return stopped
			}
		}
		var d sharding.MemoryDual
		var err error
		from := 0.0
		if x.short {
			from = x.mu
		}
		bound := func() string {
			d, err = sharding.MemoryBoundUntil(o.ctx, sg.g, lm, opts, lagSweeps, from, enough)
			if err != nil {
				return fmt.Sprintf("%q", err.Error())
			}
			return fmt.Sprintf("t free %.6g under %.6g fits %v per-edge %d sweeps %d target %.6g",
				floor(d.Bound), floor(d.Under), d.Fits, d.PerEdgeValues, d.Sweeps, target)
		}
		if stageTrace != nil {
			stageTrace(fmt.Sprintf("B%d,%s,%.8s,%dh%dd,%dx%d,%.2f,%s", o.mb, sg.g.Name, sg.hash, s.Hosts, s.Devices, l[0], l[1],
				float64(o.memory)/(1<<30), kind), bound)
		} else {
			bound()
		}
		if err != nil || d.PerEdgeValues > 0 || !finite(d.Bound) || !finite(d.Under) {
			x.short = false
			return false
		}
		x.record(d, floor, stopped)
		return true
	}
	plain, remat := &cut.plain, &cut.remat
	if f, ok := o.peaks[k]; ok && f[0] > float64(o.memory) {
		// No plan of the range fits plainly (its peak floor, memRefute): the DP rejects
		// the plain way whatever its time, and the recomputing ways come from the
		// recomputing solve, so only its bound is asked for.
		if o.remat != RematAuto {
			return false
		}
		opts.Recompute = sg.remat.layers.marks
		if (!remat.ran || b*(remat.under+redo) < target) && !run(remat, opts, "tfloor-recompute", redo) {
			return remat.ran // an earlier search's floors stand
		}
		o.timeFloors[k] = [2]float64{remat.under, remat.under + redo}
		cut.keep(o, k, target)
		return true
	}
	if !plain.ran || plain.short && b*plain.under < target {
		if !run(plain, opts, "tfloor", 0) {
			return plain.ran
		}
	}
	floors := func() [2]float64 {
		v := [2]float64{plain.under, plain.bound + redo}
		switch {
		case plain.fits:
			v[1] = plain.under + redo
		case remat.ran:
			v[1] = max(v[1], min(plain.under, remat.under)+redo)
		}
		return v
	}
	if v := floors(); !plain.fits && o.remat == RematAuto && b*v[1] < target && (!remat.ran || remat.short) {
		ropts := opts
		ropts.Recompute = sg.remat.layers.marks
		run(remat, ropts, "tfloor-recompute", redo)
	}
	o.timeFloors[k] = floors()
	cut.keep(o, k, target)
	return true
}

// timeCut is what timeRefute's searches of one range proved, and where those its target
// stopped stand.
type timeCut struct {
	plain, remat timeSearch
	target       float64 // the target the stopped searches reached
}

// timeSearch is one of timeRefute's Lagrangian searches of a range: plain, or under the
// recomputing marks.
type timeSearch struct {
	ran          bool
	under, bound float64 // the floors of its greatest Under and of its Bound
	fits         bool    // it decoded a plan that fits (once, so ever after)
	short        bool    // its target stopped it, not its sweeps: it can go on from mu
	mu           float64 // MemoryDual.Mu where it stopped
}

// record takes what a run of the search proved: any Under a run proves is a floor, so the
// greatest stands.
func (x *timeSearch) record(d sharding.MemoryDual, floor func(float64) float64, stopped bool) {
	if !x.ran {
		x.under, x.bound = math.Inf(-1), math.Inf(-1)
	}
	x.ran = true
	x.under, x.bound = max(x.under, floor(d.Under)), max(x.bound, floor(d.Bound))
	x.fits = x.fits || d.Fits
	x.short, x.mu = stopped, d.Mu
}

// keep records c as range k's searches where target stopped one, for a later target.
func (c *timeCut) keep(o *oracle, k rangeKey, target float64) {
	if c.plain.short || c.remat.short {
		c.target = target
		o.timeCuts[k] = c
	}
}

// timeRaised is c, the optimistic price of layers [start, end) on (s, l), with each way's
// time raised to its floor where timeRefute computed one.
func (o *oracle) timeRaised(c dp.StageCost, start, end int, s mesh.Submesh, l mesh.LogicalShape) dp.StageCost {
	v, ok := o.timeFloors[rangeKey{start, end, s, l}]
	if !ok || math.IsInf(v[0], -1) {
		return c
	}
	return eachWay(c, func(x *dp.StageCost) {
		floor := v[0]
		if x.Recompute {
			floor = v[1]
		}
		x.Time = max(x.Time, floor)
	})
}

// timeRefuteAll computes the time floors of the stages of the optimistic plan opt whose
// range ILP has not priced them, and reports whether one raised the time of the way opt
// runs the stage in: then the optimistic plan is made again before any range ILP is solved
// (exactly's refute). Not in settle: there the optimistic plan steps from logical mesh to
// logical mesh, and a floor on each (2-5 CPU s on GPT-39B/64's ranges) cost more than the
// layer solves it spared (DECISIONS, "pipe").
func (o *oracle) timeRefuteAll(opt *dp.Result, target float64) bool {
	if !timeFloorsOn {
		return false
	}
	if floorsToTop && o.top > 0 && !math.IsInf(o.top, 1) {
		// A floor's search is asked to reach where its range loses to the plan known
		// (lagTarget's ceiling) at once, not the count's cutoff past its headroom: the
		// cutoff rises by the yields, and each rise past a stopped search's target would
		// run it again, its planner most often built anew (the searches a CandidateMemo
		// keeps are few), where the sweeps up to the plan known cost little more.
		target = max(target, o.top*(1+boundMargin))
	}
	raised := false
	for _, st := range opt.Stages {
		k := stageKey(st)
		if e, ok := o.exactAt[k]; ok && e.exact {
			continue
		}
		if !o.timeRefute(st.Start, st.End, st.Submesh, st.Logical, target) {
			if o.ctx.Err() != nil {
				return false
			}
			continue
		}
		c := st.Cost
		c.Time -= st.Recv // the stage's own price, as the oracle gave it
		if r := o.timeRaised(c, st.Start, st.End, st.Submesh, st.Logical); r.Time > c.Time*(1+dualSlack) {
			raised = true
		}
	}
	return raised
}

// timeFloorsOn: timeRefuteAll computes time floors (off only to measure without them).
var timeFloorsOn = true

// floorsToTop: timeRefuteAll asks the floors to reach the plan known (off only to measure
// the count's own target).
var floorsToTop = true
