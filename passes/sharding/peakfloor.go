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
	least, err := leastMemories(ctx, g, lm, opts)
	if err != nil {
		return nil, err
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

// leastMemories is, per value of g, the least Memory of its candidates on lm: from
// opts.Candidates' entry where it holds them, else by leastMemory, which neither builds the
// strategies nor keeps them (a whole-network graph's candidates, enumerated only for its
// floors, cost a fifth of a second each and evicted the layers' entries from the memo),
// once per value signature (stratcache.go): the memo's signatures, else g's own.
func leastMemories(ctx context.Context, g *ir.Graph, lm *mesh.LogicalMesh, opts Options) ([]float64, error) {
	least := make([]float64, len(g.Values))
	if cands, ok := opts.Candidates.lookup(g, lm, opts); ok {
		for id, cs := range cands {
			for k, s := range cs {
				if k == 0 || float64(s.Memory) < least[id] {
					least[id] = float64(s.Memory)
				}
			}
		}
		return least, nil
	}
	if err := ir.Verify(g); err != nil {
		return nil, err
	}
	cm, err := opts.costModel()
	if err != nil {
		return nil, err
	}
	c := &strategyCache{} // the values alike in g
	if opts.Candidates != nil {
		c = &opts.Candidates.strats // and in the graphs before
	}
	convCut := !opts.FullConvs
	t := c.table(stratMeshKeyOf(lm, cm, convCut))
	var buf []byte
	for id := range g.Values {
		if id%16 == 0 && ctx.Err() != nil {
			return nil, ctx.Err()
		}
		var m int64
		m, buf = leastMemoryCached(g, lm, cm, ir.ValueID(id), convCut, c, t, buf)
		least[id] = float64(m)
	}
	return least, nil
}
