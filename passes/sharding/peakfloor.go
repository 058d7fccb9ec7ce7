package sharding

import (
	"context"

	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/mesh"
)

// PeakFloors bounds from below, for each recomputation in marks (nil: plain), the peak
// per-device memory of every plan Solve can give g on lm under opts, whatever its
// budget, restriction or forced layouts: Result.PeakMemory for a plain solve, and
// Result.PeakWith(g, marks[i]) for any result. Each value at its least candidate layout
// (the least Strategy.Memory of its candidates: a plan's strategy for the value is one of
// them, and its gathered copies only add), alive over the memory model's own live ranges
// (liveness, as PeakWith and the ILP's point rows take them), summed at the worst point:
// the memory rows' bound the solve refuses a budget by before any ILP (boundPeak), without
// the planner's ILP build. The candidates come from opts.Candidates where set.
func PeakFloors(ctx context.Context, g *ir.Graph, lm *mesh.LogicalMesh, opts Options, marks []*Recompute) ([]int64, error) {
	cands, _, _, err := opts.Candidates.candidates(ctx, g, lm, opts)
	if err != nil {
		return nil, err
	}
	least := make([]float64, len(g.Values))
	for id, cs := range cands {
		for k, s := range cs {
			if k == 0 || float64(s.Memory) < least[id] {
				least[id] = float64(s.Memory)
			}
		}
	}
	out := make([]int64, len(marks))
	for i, rc := range marks {
		if err := rc.check(g); err != nil {
			return nil, err
		}
		lr := liveness(g, rc)
		_, peak := argmax(lr.sweep(func(v ir.ValueID) float64 { return least[v] }))
		out[i] = int64(peak)
	}
	return out, nil
}
