package dp

import (
	"fmt"
	"math"

	"github.com/autopar/autopar/mesh"
)

// recurrence evaluates Alpa's F(s, k, d; t_max) over dense slices, reused across passes:
// F(s, k, d) is the least Σ t over ways to run layers [k, L) as s pipeline stages (s or more
// at the open top level, see levels) on exactly d devices, every stage no slower than t_max
// and fitting in memory at its position. The first stage of F(s, k, d) runs layers [k, i) on
// a submesh of n devices, so
//
//	F(s, k, d) = min over i, submesh { t(k, i, submesh, s, d) + F(s−1, i, d−n) },  F(0, L, 0) = 0.
//
// Requiring d = Hosts·DevicesPerHost at the top means the stages use the whole cluster.
//
// Where the oracle prices receives (a Receiver), the stages sit on a ring of the cluster's
// devices in pipeline order from device rot: the stage with d devices still to place
// starts at device (rot + N − d) mod N, so d alone says where it sits, whether it fits
// there (a submesh smaller than a host inside one host, one of whole hosts from a host's
// first device), and whether the stages before and after it on the ring share its host;
// its time t holds its receives priced by those links. The recurrence runs once per
// rotation and keeps the least: rot 0 (the first stage at device 0) and, on more than one
// host with stages smaller than a host, half a host (the first stages on host 0's upper
// half, the last ones on its lower half: the last-to-first transfers, such as a tied
// embedding's gradient, stay inside host 0). Without receives (placed false) any tiling
// of the sizes serves: Alpa's argument (the package doc) and Place.
type recurrence struct {
	t      *table
	c      Cluster
	memory float64 // bytes per device
	// fw and fl are, per slot of a first stage, its weight t + step and logical mesh for
	// the run in progress (see firstStage); unused by a maxMode run.
	fw    []float64
	fl    []int16
	first bool  // the run in progress weighs first stages by fw
	n     int   // blocks in the cluster
	u     int   // devices per block
	sizes []int // sizes[sm]: blocks of submesh sm
	f     []float64
	arg   []int32 // packed (i, sm, next level is the open top) of the minimising choice

	placed bool  // stages sit on the ring in pipeline order; else anywhere (Place)
	rots   []int // the rotations tried, in blocks: the first stage's first device / u (Rotations)
	rot    int   // the rotation of the last run (of f and arg)
	// rc holds per cell and combo (see combo) the stage's receive price; nil when the
	// oracle prices none.
	rc []float64
	// comb holds per (submesh, blocks left) the combo of a stage there at rot; −1 where it
	// cannot sit. spots lists per submesh the blocks left where it can, ascending, with
	// their combos.
	comb  []int8
	spots [][]spot
}

// spot is a count of blocks left at which a submesh's stage can sit, and its combo there.
type spot struct {
	d int32
	c int8
}

// A stage's combo says which links its receives take: bit 0 is set when the stage before
// it on the ring (the sender of Receives.Before) shares its host, bit 1 when the stage
// after it does (After); unplaced, where the search does not know (placed false), prices
// each by the cheaper link it may take.
const (
	unplaced = 4
	nCombos  = 5
)

// block is the unit the recurrence counts devices in: the greatest common divisor of the
// cluster's device count and every submesh size. With whole-host shapes only (more than
// ExhaustiveHosts hosts) it is at least a host, so the recurrence's size follows the
// host count, not the device count.
func block(devices int, subs []mesh.Submesh) int {
	u := devices
	for _, s := range subs {
		a, b := u, s.NumDevices()
		for b != 0 {
			a, b = b, a%b
		}
		u = a
	}
	return max(u, 1)
}

// MaxSearchStates bounds the states of the recurrence, (stage levels + 1) × (layers + 1) ×
// (blocks + 1), and of the cost table, (layers + 1)² × submeshes × in-flight classes: 2^25
// states are about 400 MB. A search past it is refused, naming the sizes; fewer layers
// (Options.Layers, --layers), micro-batches or hosts shrink it. Raise it here for a bigger
// search on a bigger machine.
const MaxSearchStates = 1 << 25

// checkSize refuses a search whose recurrence or table would pass MaxSearchStates.
func checkSize(layers int, c Cluster, lv levels, subs []mesh.Submesh) error {
	u := block(c.Devices(), subs)
	n := c.Devices() / u
	rec := float64(lv.top+1) * float64(layers+1) * float64(n+1)
	tab := float64(layers+1) * float64(layers+1) * float64(len(subs)) * float64(len(lv.inflight))
	if rec > MaxSearchStates || tab > MaxSearchStates {
		return fmt.Errorf("dp: the stage search for %d layers on %d×%d devices needs %.3g recurrence states (%d stage levels, %d free-device counts in blocks of %d) and %.3g table entries, more than its limit of %d (dp.MaxSearchStates, about 400 MB); fewer layers, micro-batches or hosts shrink it",
			layers, c.Hosts, c.DevicesPerHost, rec, lv.top, n+1, u, tab, MaxSearchStates)
	}
	return nil
}

// choice is one stage of a plan read back from the recurrence, with its logical mesh,
// where it sits and its receive price.
type choice struct {
	start, end, sub, class int
	logical                int16
	pos                    int     // its first device, where placed
	recv                   float64 // its receives' price, in its time
}

func newRecurrence(t *table, c Cluster, placed bool) *recurrence {
	devices := c.Devices()
	u := block(devices, t.subs)
	r := &recurrence{t: t, c: c, n: devices / u, u: u, memory: c.MemoryPerDevice,
		fw: make([]float64, len(t.bestT)), fl: make([]int16, len(t.bestT)), placed: placed && t.recv != nil}
	for _, s := range t.subs {
		r.sizes = append(r.sizes, s.NumDevices()/u)
	}
	states := (t.lv.top + 1) * (t.layers + 1) * (r.n + 1)
	r.f = make([]float64, states)
	r.arg = make([]int32, states)
	r.comb = make([]int8, len(t.subs)*(r.n+1))
	r.spots = make([][]spot, len(t.subs))
	r.rots = []int{0}
	if half := c.DevicesPerHost / 2; r.placed && c.Hosts > 1 && half >= u {
		r.rots = append(r.rots, half/u)
	}
	if t.recv != nil {
		M := c.DevicesPerHost
		r.rc = make([]float64, len(t.recv)*nCombos)
		for cell, x := range t.recv {
			s := t.subs[cell%len(t.subs)]
			part := s.Hosts == 1 && s.Devices < M // may share its host
			for b := range nCombos {
				before, after := x.Before.Cross, x.After.Cross
				switch {
				case !part:
				case b == unplaced:
					before, after = min(x.Before.Same, x.Before.Cross), min(x.After.Same, x.After.Cross)
				default:
					if b&1 != 0 {
						before = x.Before.Same
					}
					if b&2 != 0 {
						after = x.After.Same
					}
				}
				r.rc[cell*nCombos+b] = x.Far + before + after
			}
		}
	}
	r.place(0)
	return r
}

// restricts reports whether the ring admits fewer plans than a free tiling: on more than
// one host with stages smaller than a host, some sequences of sizes straddle a host on
// every rotation.
func (r *recurrence) restricts() bool {
	return r.placed && r.c.Hosts > 1 && r.u < r.c.DevicesPerHost
}

// place sets comb for rotation rot.
func (r *recurrence) place(rot int) {
	r.rot = rot
	N, M, u := r.n, r.c.DevicesPerHost, r.u
	all := N * u
	for sm, s := range r.t.subs {
		n := r.sizes[sm] * u
		part := s.Hosts == 1 && s.Devices < M
		for d := 0; d <= N; d++ {
			c := int8(unplaced)
			if r.placed {
				c = -1
				p := (rot + N - d) % N * u
				switch {
				case part && p%M+n <= M:
					c = 0
					if (p-1+all)%all/M == p/M {
						c |= 1
					}
					if (p+n)%all/M == p/M {
						c |= 2
					}
				case !part && p%M == 0 && p+n <= all:
					c = 0
				}
			}
			r.comb[sm*(N+1)+d] = c
		}
		r.spots[sm] = r.spots[sm][:0]
		for d := r.sizes[sm]; d <= N; d++ {
			if c := r.comb[sm*(N+1)+d]; c >= 0 {
				r.spots[sm] = append(r.spots[sm], spot{int32(d), c})
			}
		}
	}
}

// add is the receive price of cell's stage at combo c.
func (r *recurrence) add(cell int, c int8) float64 {
	if r.rc == nil {
		return 0
	}
	return r.rc[cell*nCombos+int(c)]
}

// combos lists the combos a stage on submesh sm may take: every placed one (only 0 for
// one that fills its hosts), or unplaced.
func (r *recurrence) combos(sm int) []int8 {
	switch s := r.t.subs[sm]; {
	case r.rc == nil:
		return []int8{0}
	case !r.placed:
		return []int8{unplaced}
	case s.Hosts == 1 && s.Devices < r.c.DevicesPerHost:
		return []int8{0, 1, 2, 3}
	}
	return []int8{0}
}

func (r *recurrence) idx(h, k, d int) int { return (h*(r.t.layers+1)+k)*(r.n+1) + d }

// run fills F using per-slot weights w, admitting only stages with w ≤ limit, and returns
// min over levels (and rotations) of F(s, 0, N); f and arg are left at the rotation that
// attains it. A stage's weight holds its receives at its place. A first stage (layers
// [0, i)) is weighed instead by its micro-batch time plus its step part (firstStage),
// admitted if its micro-batch time is at most limit. With maxMode the path value is the
// max of its weights instead of their sum, without receives, and first stages are weighed
// by w like the others: run(minMem, +Inf, true) is the least per-device memory any plan
// needs.
func (r *recurrence) run(w []float64, limit float64, maxMode bool) float64 {
	best, at := math.Inf(1), -1
	for _, rot := range r.rots {
		if v := r.runAt(rot, w, limit, maxMode); v < best {
			best, at = v, rot
		}
	}
	if at >= 0 && at != r.rot {
		r.runAt(at, w, limit, maxMode)
	}
	return best
}

func (r *recurrence) runAt(rot int, w []float64, limit float64, maxMode bool) float64 {
	L := r.t.layers
	if rot != r.rot {
		r.place(rot)
	}
	r.first = !maxMode
	if r.first {
		r.firstStage(limit)
	}
	for i := range r.f {
		r.f[i] = math.Inf(1)
	}
	r.f[r.idx(0, L, 0)] = 0
	for h := 1; h <= r.t.lv.top; h++ {
		for k := L - h; k >= 0; k-- {
			r.state(w, limit, maxMode, h, k)
		}
	}
	best := math.Inf(1)
	for h := 1; h <= r.t.lv.top; h++ {
		best = min(best, r.f[r.idx(h, 0, r.n)])
	}
	return best
}

// state fills F(h, k, ·) for every device count from states of later layers (for k = 0
// only the whole cluster's, the one read). Choices are tried in a fixed order (end layer,
// then submesh, then next level) and only a strictly better one replaces the incumbent, so
// plans are deterministic.
func (r *recurrence) state(w []float64, limit float64, maxMode bool, h, k int) {
	t, L, N := r.t, r.t.layers, r.n
	open := t.lv.open && h == t.lv.top
	row := r.f[r.idx(h, k, 0) : r.idx(h, k, N)+1]
	arg := r.arg[r.idx(h, k, 0) : r.idx(h, k, N)+1]
	firstW := k == 0 && r.first
	for i := k + 1; i <= L-(h-1); i++ {
		prev := r.f[r.idx(h-1, i, 0) : r.idx(h-1, i, N)+1]
		var self []float64
		if open {
			self = r.f[r.idx(h, i, 0) : r.idx(h, i, N)+1]
		}
		for sm, n := range r.sizes {
			if n > N {
				continue
			}
			slot := t.slot(t.lv.class[h], k, i, sm)
			base := w[slot]
			if firstW {
				base = r.fw[slot]
			}
			if math.IsInf(base, 1) {
				continue
			}
			cell := t.cell(k, i, sm)
			var xs [nCombos]float64 // its weight at each combo; NaN where over the limit
			for c := range xs {
				x := base
				if !firstW {
					if !maxMode {
						x += r.add(cell, int8(c))
					}
					if !(x <= limit) {
						x = math.NaN()
					}
				}
				xs[c] = x
			}
			spots := r.spots[sm]
			if k == 0 {
				// only the whole cluster's first stage is read
				if c := r.comb[sm*(N+1)+N]; c >= 0 {
					spots = []spot{{int32(N), c}}
				} else {
					spots = nil
				}
			}
			for _, sp := range spots {
				d, x := int(sp.d), xs[sp.c]
				if x != x {
					continue
				}
				nx, up := prev[d-n], int32(0)
				if self != nil && self[d-n] < nx {
					nx, up = self[d-n], 1
				}
				v := x + nx
				if maxMode {
					v = max(x, nx)
				}
				if v < row[d] {
					row[d], arg[d] = v, (int32(i)*int32(len(r.sizes))+int32(sm))*2+up
				}
			}
		}
	}
}

// path reads back the plan that attains min over levels of F(s, 0, N) after run; nil if
// there is none.
func (r *recurrence) path() []choice {
	h, best := 0, math.Inf(1)
	for l := 1; l <= r.t.lv.top; l++ {
		if v := r.f[r.idx(l, 0, r.n)]; v < best {
			h, best = l, v
		}
	}
	if h == 0 {
		return nil
	}
	var out []choice
	N := r.n
	for k, d := 0, N; k < r.t.layers; {
		a := int(r.arg[r.idx(h, k, d)])
		up, sm, i := a%2, (a/2)%len(r.sizes), a/2/len(r.sizes)
		ch := choice{start: k, end: i, sub: sm, class: r.t.lv.class[h]}
		ch.logical = r.t.bestL[r.t.slot(ch.class, k, i, sm)]
		if k == 0 && r.first {
			ch.logical = r.fl[r.t.slot(ch.class, k, i, sm)]
		}
		ch.pos = (r.rot + N - d) % N * r.u
		ch.recv = r.add(r.t.cell(k, i, sm), r.comb[sm*(N+1)+d])
		out = append(out, ch)
		k, d = i, d-r.sizes[sm]
		if up == 0 {
			h--
		}
	}
	return out
}

// firstStage fills fw and fl, per slot of a first stage (layers [0, i)) at the run's
// rotation, with the least t + step over the logical meshes that fit at the slot's
// in-flight class and run no slower than limit per micro-batch (t with the stage's
// receives where it sits), and that logical mesh's index; +Inf and −1 where none does.
// The first stage is the one whose step part lies on the critical path (see Solve), so
// its logical mesh weighs both parts; every later stage's weighs its micro-batch time only.
func (r *recurrence) firstStage(limit float64) {
	t, N := r.t, r.n
	for cls, f := range t.lv.inflight {
		for i := 1; i <= t.layers; i++ {
			for sm := range t.subs {
				x := t.slot(cls, 0, i, sm)
				r.fw[x], r.fl[x] = math.Inf(1), -1
				c := r.comb[sm*(N+1)+N]
				if c < 0 {
					continue
				}
				add := r.add(t.cell(0, i, sm), c)
				for l, sc := range t.costs[t.cell(0, i, sm)] {
					if math.IsNaN(sc.Time) || !(sc.Time+add <= limit) || sc.Memory(f) > r.memory {
						continue
					}
					if v := sc.Time + add + sc.Step; v < r.fw[x] {
						r.fw[x], r.fl[x] = v, int16(l)
					}
				}
			}
		}
	}
}

// firstTimes lists the micro-batch time, with each receive price it may take, of every
// logical mesh of a first stage that fits in memory at some in-flight class: with
// firstStage weighing the step part, a first stage need not take its slot's fastest
// logical mesh, so its times are t_max candidates too.
func (r *recurrence) firstTimes() []float64 {
	t := r.t
	var out []float64
	for i := 1; i <= t.layers; i++ {
		for sm := range t.subs {
			cell := t.cell(0, i, sm)
			for _, sc := range t.costs[cell] {
				if math.IsNaN(sc.Time) {
					continue
				}
				for _, f := range t.lv.inflight {
					if sc.Memory(f) <= r.memory {
						for _, c := range r.combos(sm) {
							out = append(out, sc.Time+r.add(cell, c))
						}
						break
					}
				}
			}
		}
	}
	return out
}
