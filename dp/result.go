package dp

import (
	"cmp"
	"fmt"
	"slices"
)

// result turns the best plan into stages with costs, memory and device placement.
func (s *search) result() *Result {
	res := &Result{Stats: s.stats}
	for _, ch := range s.plan {
		li := ch.logical
		cost := s.t.costs[s.t.cell(ch.start, ch.end, ch.sub)][li]
		f := s.t.lv.inflight[ch.class]
		res.Stages = append(res.Stages, Stage{
			Start: ch.start, End: ch.end,
			Submesh: s.t.subs[ch.sub], Logical: s.t.logical(ch.start, ch.end, ch.sub, li),
			Cost: cost, InFlight: f, Memory: cost.Memory(f),
		})
	}
	res.Compute, res.MaxTime, res.Step = s.times(s.plan)
	res.Bubble = (s.b - 1) * res.MaxTime
	res.Time = res.Compute + res.Bubble + res.Step
	Place(s.c, res.Stages)
	return res
}

// Place assigns device IDs (host·DevicesPerHost + j) to stages whose submesh sizes sum to the
// cluster's device count, setting each Stage.Devices: largest submesh first (earlier stage
// first on ties), each on the next free block. Every size is a power of two dividing
// DevicesPerHost or a whole number of hosts, so each block is aligned to its size and none
// smaller than a host straddles two. Place panics if the sizes do not sum to the cluster's
// devices, which Solve never produces.
func Place(c Cluster, stages []Stage) {
	order := make([]int, len(stages))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		return cmp.Compare(stages[b].Submesh.NumDevices(), stages[a].Submesh.NumDevices())
	})
	next := 0
	for _, i := range order {
		n := stages[i].Submesh.NumDevices()
		stages[i].Devices = make([]int, n)
		for j := range n {
			stages[i].Devices[j] = next + j
		}
		next += n
	}
	if next != c.Devices() {
		panic(fmt.Sprintf("dp: stages use %d devices, the cluster has %d", next, c.Devices()))
	}
}
