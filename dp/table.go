package dp

import (
	"context"
	"fmt"
	"math"

	"github.com/autopar/autopar/mesh"
	"github.com/autopar/autopar/program"
)

// levels describes the first index of the recurrence, s = stages remaining. Memory depends
// on a stage's position counted from the END of the pipeline (1F1B keeps S−i micro-batches
// alive at stage i), which is why the recurrence peels stages off the front and counts the
// ones left: the first stage of F(s, ·, ·) knows it has s−1 stages after it.
//
// Only s's effect on memory and on the stage count limit matters, so s is capped: with no
// stage limit and no pinned boundaries, level top stands for "top or more stages remain"
// (open), because every s ≥ top holds the same number of micro-batches in flight.
type levels struct {
	top      int   // highest level
	open     bool  // level top means ≥ top stages remain
	class    []int // class[h]: inflight class of a first stage at level h (h ≥ 1)
	inflight []int // inflight[c]: micro-batches alive in a stage of class c
}

func newLevels(layers int, c Cluster, o Options) levels {
	most := min(layers, c.Devices())
	lv := levels{}
	switch {
	case o.Constraints.Boundaries != nil:
		lv.top = len(o.Constraints.Boundaries) - 1
	case o.MaxStages > 0:
		lv.top = min(o.MaxStages, most)
	case o.Schedule == program.GPipe:
		lv.top, lv.open = 1, true
	default:
		lv.top, lv.open = min(o.Microbatches, most), true
	}
	lv.class = make([]int, lv.top+1)
	seen := map[int]int{}
	for h := 1; h <= lv.top; h++ {
		f := InFlight(o.Schedule, h, o.Microbatches)
		if _, ok := seen[f]; !ok {
			seen[f] = len(lv.inflight)
			lv.inflight = append(lv.inflight, f)
		}
		lv.class[h] = seen[f]
	}
	return lv
}

// table holds every oracle answer and, per (inflight class, start, end, submesh), the
// fastest logical mesh that fits in memory, so that each t_max pass of the recurrence is a
// scan of plain float slices.
type table struct {
	layers int
	subs   []mesh.Submesh
	logs   [][]mesh.LogicalShape
	lv     levels
	// costs holds per cell the costs of its entries: entry l < len(logs[sm]) is logical
	// mesh l's cost, each later one a recomputing alternative (StageCost.Remat) of the
	// logical mesh remat names. Time NaN = no sharding.
	costs  [][]StageCost // [cell(k, i, sm)][entry]
	remat  [][]int16     // [cell(k, i, sm)][entry − len(logs[sm])] its logical index
	bestT  []float64     // [slot(cls, k, i, sm)] fastest feasible time; +Inf = none
	bestL  []int16       // [slot(...)] its entry (see logical)
	minMem []float64     // [slot(...)] smallest memory over logicals, ignoring the budget
	// recv holds per cell the stage's receives (Receiver.Receives); nil when the oracle
	// does not price them
	recv []Receives
}

func (t *table) cell(k, i, sm int) int { return (k*(t.layers+1)+i)*len(t.subs) + sm }

// logical is the logical mesh of entry e of cell (k, i, sm).
func (t *table) logical(k, i, sm int, e int16) mesh.LogicalShape {
	if n := len(t.logs[sm]); int(e) >= n {
		e = t.remat[t.cell(k, i, sm)][int(e)-n]
	}
	return t.logs[sm][e]
}

func (t *table) slot(cls, k, i, sm int) int {
	return cls*(t.layers+1)*(t.layers+1)*len(t.subs) + t.cell(k, i, sm)
}

// buildTable asks the oracle for every stage the rules allow.
func buildTable(ctx context.Context, layers int, c Cluster, o Oracle, lv levels, r *rules) (*table, error) {
	t := &table{layers: layers, lv: lv}
	t.subs, t.logs = shapes(c, r.c)
	cells := (layers + 1) * (layers + 1) * len(t.subs)
	t.costs = make([][]StageCost, cells)
	t.remat = make([][]int16, cells)
	t.bestT = make([]float64, cells*len(lv.inflight))
	t.bestL = make([]int16, len(t.bestT))
	t.minMem = make([]float64, len(t.bestT))
	for i := range t.bestT {
		t.bestT[i], t.bestL[i], t.minMem[i] = math.Inf(1), -1, math.Inf(1)
	}
	rv, _ := o.(Receiver)
	if rv != nil {
		t.recv = make([]Receives, cells)
	}
	for k := 0; k < layers; k++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		for i := k + 1; i <= layers; i++ {
			if !r.rangeOK(k, i) {
				continue
			}
			for sm := range t.subs {
				if err := t.fill(k, i, sm, c, o, r); err != nil {
					return nil, err
				}
				if rv == nil {
					continue
				}
				x := rv.Receives(k, i, t.subs[sm])
				if err := x.validate(); err != nil {
					return nil, fmt.Errorf("dp: oracle receives of layers [%d, %d) on submesh %v: %v", k, i, t.subs[sm], err)
				}
				t.recv[t.cell(k, i, sm)] = x
			}
		}
	}
	return t, nil
}

// fill asks the oracle about layers [k, i) on submesh sm under every allowed logical mesh
// and keeps, per inflight class, the fastest that fits (the first in LogicalShapes order on
// ties).
func (t *table) fill(k, i, sm int, c Cluster, o Oracle, r *rules) error {
	s := t.subs[sm]
	row := make([]StageCost, len(t.logs[sm]))
	var alts []StageCost // the recomputing alternatives, entries after the logical meshes'
	var of []int16
	for li, l := range t.logs[sm] {
		row[li].Time = math.NaN()
		if !r.meshOK(k, s, l) {
			continue
		}
		sc, ok := o.StageCost(k, i, s, l)
		if !ok {
			continue
		}
		if err := sc.validate(); err != nil {
			return fmt.Errorf("dp: oracle cost of layers [%d, %d) on submesh %v, logical mesh %v: %v", k, i, s, l, err)
		}
		for _, alt := range sc.Remat {
			alts = append(alts, alt)
			of = append(of, int16(li))
		}
		sc.Remat = nil
		row[li] = sc
	}
	row = append(row, alts...)
	for e, sc := range row {
		if math.IsNaN(sc.Time) {
			continue
		}
		for cls, f := range t.lv.inflight {
			x := t.slot(cls, k, i, sm)
			mem := sc.Memory(f)
			t.minMem[x] = min(t.minMem[x], mem)
			if mem <= c.MemoryPerDevice && sc.Time < t.bestT[x] {
				t.bestT[x], t.bestL[x] = sc.Time, int16(e)
			}
		}
	}
	t.costs[t.cell(k, i, sm)], t.remat[t.cell(k, i, sm)] = row, of
	return nil
}
