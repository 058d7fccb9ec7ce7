package dp

import (
	"cmp"
	"fmt"
	"slices"
)

// result turns the best plan into stages with costs, memory and device placement.
func (s *search) result() *Result {
	res := &Result{Stats: s.stats, Placed: s.rec.placed}
	for _, ch := range s.plan {
		li := ch.logical
		cost := s.t.costs[s.t.cell(ch.start, ch.end, ch.sub)][li]
		cost.Time += ch.recv
		f := s.t.lv.inflight[ch.class]
		st := Stage{
			Start: ch.start, End: ch.end,
			Submesh: s.t.subs[ch.sub], Logical: s.t.logical(ch.start, ch.end, ch.sub, li),
			Cost: cost, Recv: ch.recv, InFlight: f, Memory: cost.Memory(f),
		}
		if res.Placed {
			st.Devices = make([]int, st.Submesh.NumDevices())
			for j := range st.Devices {
				st.Devices[j] = ch.pos + j
			}
		}
		res.Stages = append(res.Stages, st)
	}
	res.Compute, res.MaxTime, res.Step = s.times(s.plan)
	res.Bubble = (s.b - 1) * res.MaxTime
	res.Time = res.Compute + res.Bubble + res.Step
	if !res.Placed {
		Place(s.c, res.Stages)
	}
	return res
}

// Place assigns device IDs (host·DevicesPerHost + j) to stages whose submesh sizes sum to the
// cluster's device count, setting each Stage.Devices, so that pipeline neighbours (stages i
// and i+1) smaller than a host share one where the sizes allow: PlaceBy with weight 1 for
// each neighbouring pair.
func Place(c Cluster, stages []Stage) {
	PlaceBy(c, stages, func(a, b int) float64 {
		if a-b == 1 || b-a == 1 {
			return 1
		}
		return 0
	})
}

// placeNodes caps PlaceBy's search over packings; past it the best packing found is kept.
const placeNodes = 100000

// PlaceBy assigns device IDs as Place does, choosing, among the packings of the stages
// smaller than a host into whole hosts, one of greatest Σ weight(a, b) over the pairs a < b
// that share a host (weight: what keeping a and b on one host saves, ≥ 0). Only those
// stages' grouping matters to the price of a transfer (mesh.Cluster.SendRecvCost: inside
// one host or across hosts); a stage of one or more whole hosts shares a host with none.
//
// The layout: largest submesh first (earlier stage first on ties), each on the next free
// block — stages of whole hosts, then the hosts packed with smaller stages, each host's
// stages largest first. Every size is a power of two dividing DevicesPerHost or a whole
// number of hosts, so each block is aligned to its size and none smaller than a host
// straddles two. The packing of that layout is kept unless another weighs strictly more;
// the search is deterministic (stages in pipeline order, a bounded depth-first search).
// PlaceBy panics if the sizes do not sum to the cluster's devices, which Solve never
// produces.
func PlaceBy(c Cluster, stages []Stage, weight func(a, b int) float64) {
	order := make([]int, len(stages))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		return cmp.Compare(stages[b].Submesh.NumDevices(), stages[a].Submesh.NumDevices())
	})
	total := 0
	for _, s := range stages {
		total += s.Submesh.NumDevices()
	}
	if total != c.Devices() {
		panic(fmt.Sprintf("dp: stages use %d devices, the cluster has %d", total, c.Devices()))
	}
	if bins := packSmall(c.DevicesPerHost, stages, order, weight); bins != nil {
		// whole-host stages as before, then each host's stages largest first
		k := 0
		for k < len(order) && stages[order[k]].Submesh.NumDevices() >= c.DevicesPerHost {
			k++
		}
		order = order[:k]
		for _, b := range bins {
			slices.SortStableFunc(b, func(x, y int) int {
				return cmp.Or(cmp.Compare(stages[y].Submesh.NumDevices(), stages[x].Submesh.NumDevices()), cmp.Compare(x, y))
			})
			order = append(order, b...)
		}
	}
	next := 0
	for _, i := range order {
		n := stages[i].Submesh.NumDevices()
		stages[i].Devices = make([]int, n)
		for j := range n {
			stages[i].Devices[j] = next + j
		}
		next += n
	}
}

// packSmall returns the hosts' groups of the stages smaller than a host (D devices) of
// greatest weight, ordered by their first stage, or nil when the largest-first layout's
// packing (order) weighs as much.
func packSmall(D int, stages []Stage, order []int, weight func(a, b int) float64) [][]int {
	var small []int // pipeline order
	for i, s := range stages {
		if s.Submesh.NumDevices() < D {
			small = append(small, i)
		}
	}
	if len(small) < 3 {
		return nil // at most one packing
	}
	// the largest-first layout's packing: small stages fill hosts in that order
	base, fill := make([]int, len(stages)), 0
	for _, i := range order {
		if n := stages[i].Submesh.NumDevices(); n < D {
			base[i] = fill / D
			fill += n
		}
	}
	score := func(bin func(int) int) float64 {
		s := 0.0
		for x, a := range small {
			for _, b := range small[x+1:] {
				if bin(a) == bin(b) {
					s += weight(a, b)
				}
			}
		}
		return s
	}
	best := score(func(i int) int { return base[i] })
	// rest[k]: the weight of the pairs with a stage at small[k:], an upper bound of what
	// placing them can add
	rest := make([]float64, len(small)+1)
	for k := len(small) - 1; k >= 0; k-- {
		rest[k] = rest[k+1]
		for _, a := range small[:k] {
			rest[k] += weight(a, small[k])
		}
	}
	hosts := fill / D
	var room []int                // per open host: its free devices
	at := make([]int, len(small)) // per small stage: its host
	var bestAt []int
	nodes := 0
	var rec func(k int, got float64)
	rec = func(k int, got float64) {
		nodes++
		if got+rest[k] <= best || nodes > placeNodes {
			return
		}
		if k == len(small) {
			best, bestAt = got, slices.Clone(at)
			return
		}
		n := stages[small[k]].Submesh.NumDevices()
		for h := 0; h <= len(room) && h < hosts; h++ {
			if h == len(room) {
				room = append(room, D)
			}
			if room[h] >= n {
				add := 0.0
				for x := range k {
					if at[x] == h {
						add += weight(small[x], small[k])
					}
				}
				room[h] -= n
				at[k] = h
				rec(k+1, got+add)
				room[h] += n
			}
			if room[h] == D {
				room = room[:h] // a new host: one of them is enough
				break
			}
		}
	}
	rec(0, 0)
	if bestAt == nil {
		return nil
	}
	bins := make([][]int, hosts)
	for x, h := range bestAt {
		bins[h] = append(bins[h], small[x])
	}
	return bins
}
