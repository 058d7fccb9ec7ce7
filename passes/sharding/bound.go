package sharding

import (
	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/mesh"
)

// KernelBounds returns, per value of g, a lower bound on the Compute + Comm of every
// strategy of it on lm priced under opts, without enumerating strategies: Alpa's perfect
// scaling bound, the op's kernel (costModel.compute) with its FLOPs and the bytes it reads
// and writes split evenly over every device of lm (less what a fused kernel keeps,
// fusion.go, as the strategies are priced), and no communication. It holds because
// a strategy splits the FLOPs over at most lm.Size() devices, a device holds at least
// 1/lm.Size() of each operand and of the result (shards divide exactly), the roofline
// grows with both, and collectives cost no less than nothing. Since Result.Cost.Total sums
// each value's Compute and Comm plus resharding, the sum over the values bounds any
// solution's Total from below; on a one-device mesh it equals the only plan's Total.
func KernelBounds(g *ir.Graph, lm *mesh.LogicalMesh, opts Options) ([]float64, error) {
	cm, err := opts.costModel()
	if err != nil {
		return nil, err
	}
	n := lm.Size()
	fu := fusionOf(g, opts, cm) // the bytes a fused kernel keeps are not counted, as in expand
	out := make([]float64, len(g.Values))
	for id := range g.Values {
		v := &g.Values[id]
		var bytes int64
		if fu.writes(ir.ValueID(id)) {
			bytes = v.Type.Bytes()
		}
		dt := v.Type.DType
		for i, a := range v.Args {
			t := g.Value(a).Type
			if fu.reads(ir.ValueID(id), i) {
				bytes += int64(float64(t.Bytes()) * fu.readScale(ir.ValueID(id), i))
			}
			if i == 0 {
				dt = t.DType // as enumerator.computeDType
			}
		}
		out[id] = cm.compute(v.Op, OpClass(v.Op, g.Dims(ir.ValueID(id))), dt, g.FLOPs(ir.ValueID(id)), n, float64(bytes)/float64(n), lm.HostDevices(), !fu.launches(ir.ValueID(id)))
	}
	return out, nil
}
