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
//	F(s, k, d) = min over i, submesh { t(k, i, submesh, s) + F(s−1, i, d−n) },  F(0, L, 0) = 0.
//
// Requiring d = Hosts·DevicesPerHost at the top means the stages use the whole cluster,
// which the shapes of Submeshes always tile (see the package doc).
type recurrence struct {
	t      *table
	memory float64 // bytes per device
	// fw and fl are, per slot of a first stage, its weight t + step and logical mesh for
	// the run in progress (see table.firstStage); unused by a maxMode run.
	fw    []float64
	fl    []int16
	first bool  // the run in progress weighs first stages by fw
	n     int   // blocks in the cluster
	sizes []int // sizes[sm]: blocks of submesh sm
	f     []float64
	arg   []int32 // packed (i, sm, next level is the open top) of the minimising choice
}

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

// choice is one stage of a plan read back from the recurrence, with its logical mesh.
type choice struct {
	start, end, sub, class int
	logical                int16
}

func newRecurrence(t *table, c Cluster) *recurrence {
	devices := c.Devices()
	u := block(devices, t.subs)
	r := &recurrence{t: t, n: devices / u, memory: c.MemoryPerDevice,
		fw: make([]float64, len(t.bestT)), fl: make([]int16, len(t.bestT))}
	for _, s := range t.subs {
		r.sizes = append(r.sizes, s.NumDevices()/u)
	}
	states := (t.lv.top + 1) * (t.layers + 1) * (devices + 1)
	r.f = make([]float64, states)
	r.arg = make([]int32, states)
	return r
}

func (r *recurrence) idx(h, k, d int) int { return (h*(r.t.layers+1)+k)*(r.n+1) + d }

// run fills F using per-slot weights w, admitting only stages with w ≤ limit, and returns
// min over levels of F(s, 0, N). A first stage (layers [0, i)) is weighed instead by its
// micro-batch time plus its step part (table.firstStage), admitted if its micro-batch time
// is at most limit. With maxMode the path value is the max of its weights instead of their
// sum, and first stages are weighed by w like the others: run(minMem, +Inf, true) is the
// least per-device memory any plan needs.
func (r *recurrence) run(w []float64, limit float64, maxMode bool) float64 {
	L := r.t.layers
	r.first = !maxMode
	if r.first {
		r.t.firstStage(limit, r.memory, r.fw, r.fl)
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

// state fills F(h, k, ·) for every device count from states of later layers. Choices are
// tried in a fixed order (end layer, then submesh, then next level) and only a strictly
// better one replaces the incumbent, so plans are deterministic.
func (r *recurrence) state(w []float64, limit float64, maxMode bool, h, k int) {
	t, L, N := r.t, r.t.layers, r.n
	open := t.lv.open && h == t.lv.top
	row := r.f[r.idx(h, k, 0) : r.idx(h, k, N)+1]
	arg := r.arg[r.idx(h, k, 0) : r.idx(h, k, N)+1]
	for i := k + 1; i <= L-(h-1); i++ {
		prev := r.f[r.idx(h-1, i, 0) : r.idx(h-1, i, N)+1]
		var self []float64
		if open {
			self = r.f[r.idx(h, i, 0) : r.idx(h, i, N)+1]
		}
		for sm, n := range r.sizes {
			x := w[t.slot(t.lv.class[h], k, i, sm)]
			if k == 0 && r.first {
				if x = r.fw[t.slot(t.lv.class[h], k, i, sm)]; math.IsInf(x, 1) || n > N {
					continue
				}
			} else if !(x <= limit) || n > N {
				continue
			}
			for d := n; d <= N; d++ {
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
	for k, d := 0, r.n; k < r.t.layers; {
		a := int(r.arg[r.idx(h, k, d)])
		up, sm, i := a%2, (a/2)%len(r.sizes), a/2/len(r.sizes)
		ch := choice{start: k, end: i, sub: sm, class: r.t.lv.class[h]}
		ch.logical = r.t.bestL[r.t.slot(ch.class, k, i, sm)]
		if k == 0 && r.first {
			ch.logical = r.fl[r.t.slot(ch.class, k, i, sm)]
		}
		out = append(out, ch)
		k, d = i, d-r.sizes[sm]
		if up == 0 {
			h--
		}
	}
	return out
}
