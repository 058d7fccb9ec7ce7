package dp

import "math"

// bruteResult is what exhaustive search finds.
type bruteResult struct {
	time float64 // least Σ t + (B−1)·max t + the first stage's Step over feasible plans; +Inf if none
	need float64 // least over all plans (memory ignored) of the largest stage memory; +Inf if none
	plan []Stage // one optimal plan
}

// brute enumerates every slicing of layers into contiguous stages, every sequence of
// submesh shapes whose devices sum to the cluster's, and every logical mesh per stage, and
// keeps the plans that allow accepts (nil accepts all) and that respect MaxStages. It shares
// nothing with Solve but the exported helpers Submeshes, LogicalShapes and InFlight.
func brute(layers int, c Cluster, o Oracle, opts Options, allow func([]Stage) bool) bruteResult {
	res := bruteResult{time: math.Inf(1), need: math.Inf(1)}
	var stages []Stage
	var rec func(k, d int)
	rec = func(k, d int) {
		if k == layers {
			if d == 0 {
				res.score(stages, c, opts, allow)
			}
			return
		}
		for i := k + 1; i <= layers; i++ {
			for _, s := range Submeshes(c) {
				if s.NumDevices() > d {
					continue
				}
				for _, l := range LogicalShapes(s) {
					sc, ok := o.StageCost(k, i, s, l)
					if !ok {
						continue
					}
					stages = append(stages, Stage{Start: k, End: i, Submesh: s, Logical: l, Cost: sc})
					rec(i, d-s.NumDevices())
					stages = stages[:len(stages)-1]
				}
			}
		}
	}
	rec(0, c.Devices())
	return res
}

func (r *bruteResult) score(stages []Stage, c Cluster, opts Options, allow func([]Stage) bool) {
	S := len(stages)
	if (opts.MaxStages > 0 && S > opts.MaxStages) || (allow != nil && !allow(stages)) {
		return
	}
	sum, slowest, peak := 0.0, 0.0, 0.0
	for i, st := range stages {
		mem := st.Cost.WeightBytes + float64(InFlight(opts.Schedule, S-i, opts.Microbatches))*st.Cost.ActBytes
		peak = max(peak, mem)
		sum += st.Cost.Time
		slowest = max(slowest, st.Cost.Time)
	}
	r.need = min(r.need, peak)
	if peak > c.MemoryPerDevice {
		return
	}
	if t := sum + float64(opts.Microbatches-1)*slowest + stages[0].Cost.Step; t < r.time {
		r.time, r.plan = t, append([]Stage(nil), stages...)
	}
}
