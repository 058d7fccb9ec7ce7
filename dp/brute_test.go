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
//
// Where o prices receives (a Receiver), a plan's stages also sit somewhere: brute tries
// the first stage at device 0 and at half a host, the stages laid one after another around
// the cluster's devices in pipeline order (a stage on a contiguous run of device IDs, one
// smaller than a host inside one host, one of whole hosts from a host's first device),
// and prices each stage's receives from the stages before and after it (its ring
// neighbours: the last stage is the first's) by whether both sit on one and the same
// host, as mesh.Cluster.SendRecvCost does. If no plan fits on any such layout, it
// prices each receive by the cheaper link instead and drops the layout (Solve's fallback).
func brute(layers int, c Cluster, o Oracle, opts Options, allow func([]Stage) bool) bruteResult {
	res := bruteResult{time: math.Inf(1), need: math.Inf(1)}
	rv, _ := o.(Receiver)
	free := bruteResult{time: math.Inf(1), need: math.Inf(1)}
	var stages []Stage
	var rec func(k, d int)
	rec = func(k, d int) {
		if k == layers {
			if d != 0 {
				return
			}
			if rv == nil {
				res.score(stages, c, opts, allow)
				return
			}
			for _, r := range []int{0, c.DevicesPerHost / 2} {
				if ring(stages, c, r, rv, layers) {
					res.score(stages, c, opts, allow)
				}
			}
			unplacedRecv(stages, c, rv)
			free.score(stages, c, opts, allow)
			for i := range stages {
				stages[i].Recv = 0
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
	if rv != nil && math.IsInf(res.time, 1) {
		return free // its need is over every plan, laid out or not
	}
	return res
}

// ring lays stages from device r around the cluster and sets each one's Devices and Recv;
// false if some stage cannot sit there.
func ring(stages []Stage, c Cluster, r int, rv Receiver, layers int) bool {
	N, M := c.Devices(), c.DevicesPerHost
	p := r
	for i := range stages {
		s := stages[i].Submesh
		n := s.NumDevices()
		q := p % N
		if q+n > N || (s.Hosts > 1 || s.Devices == M) && q%M != 0 || s.Hosts == 1 && q/M != (q+n-1)/M {
			return false
		}
		stages[i].Devices = stages[i].Devices[:0]
		for j := range n {
			stages[i].Devices = append(stages[i].Devices, q+j)
		}
		p += n
	}
	host := func(s Stage) int { // its host, −1 if it spans more than one
		h := s.Devices[0] / M
		for _, d := range s.Devices {
			if d/M != h {
				return -1
			}
		}
		return h
	}
	same := func(a, b Stage) bool { return host(a) >= 0 && host(a) == host(b) }
	S := len(stages)
	for i := range stages {
		x := rv.Receives(stages[i].Start, stages[i].End, stages[i].Submesh)
		recv := x.Far + x.Before.Cross + x.After.Cross
		if same(stages[i], stages[(i+S-1)%S]) {
			recv += x.Before.Same - x.Before.Cross
		}
		if same(stages[i], stages[(i+1)%S]) {
			recv += x.After.Same - x.After.Cross
		}
		stages[i].Recv = recv
	}
	return true
}

// unplacedRecv prices each stage's receives by the cheaper link where it may share a host.
func unplacedRecv(stages []Stage, c Cluster, rv Receiver) {
	for i, st := range stages {
		x := rv.Receives(st.Start, st.End, st.Submesh)
		stages[i].Recv = x.Far + x.Before.Cross + x.After.Cross
		if st.Submesh.Hosts == 1 && st.Submesh.Devices < c.DevicesPerHost {
			stages[i].Recv = x.Far + min(x.Before.Same, x.Before.Cross) + min(x.After.Same, x.After.Cross)
		}
	}
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
		t := st.Cost.Time + st.Recv
		sum += t
		slowest = max(slowest, t)
	}
	r.need = min(r.need, peak)
	if peak > c.MemoryPerDevice {
		return
	}
	if t := sum + float64(opts.Microbatches-1)*slowest + stages[0].Cost.Step; t < r.time {
		r.time, r.plan = t, nil
		for _, st := range stages {
			st.Devices = append([]int(nil), st.Devices...)
			r.plan = append(r.plan, st)
		}
	}
}
