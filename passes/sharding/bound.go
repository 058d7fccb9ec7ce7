package sharding

import (
	"math"

	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/mesh"
)

// KernelBounds returns, per value of g, a lower bound on the Compute + Comm of every
// strategy of it on lm priced under opts, without enumerating strategies: Alpa's perfect
// scaling bound, the op's kernel (costModel.compute) with its FLOPs and the bytes it reads
// and writes split evenly over the most devices a strategy of it can split over
// (maxShards: every device of lm unless no dim divides an axis; less what a fused kernel
// keeps, fusion.go, as the strategies are priced), and no communication. It holds because
// a strategy splits the FLOPs over at most maxShards devices, a device holds at least
// 1/maxShards of each operand and of the result (shards divide exactly), the roofline
// grows with both, and collectives cost no less than nothing. Since Result.Cost.Total sums
// each value's Compute and Comm plus resharding, the sum over the values bounds any
// solution's Total from below; on a one-device mesh it equals the only plan's Total.
func KernelBounds(g *ir.Graph, lm *mesh.LogicalMesh, opts Options) ([]float64, error) {
	b, err := NewBounder(g, opts)
	if err != nil {
		return nil, err
	}
	return b.Bounds(lm), nil
}

// Bounder gives the KernelBounds of one graph under one Options on many meshes: each
// value's dims and FLOPs and the graph's fusion, which do not depend on the mesh, are read
// once (the fast search bounds each layer on every logical mesh of every micro-batch
// count: some 35 meshes a layer at 64 GPUs, where reading them again was most of the
// bounds' cost). Bounds may be called from one goroutine at a time.
type Bounder struct {
	g     *ir.Graph
	cm    costModel
	fu    *fusion
	rules []rule
	flops []float64
}

// NewBounder prepares KernelBounds of g under opts.
func NewBounder(g *ir.Graph, opts Options) (*Bounder, error) {
	cm, err := opts.costModel()
	if err != nil {
		return nil, err
	}
	b := &Bounder{g: g, cm: cm, fu: fusionOf(g, opts, cm), // the bytes a fused kernel keeps are not counted, as in expand
		rules: make([]rule, len(g.Values)), flops: make([]float64, len(g.Values))}
	for id := range g.Values {
		b.rules[id] = ruleOf(g, ir.ValueID(id)) // its dims, read once (Dims is the dear part)
		b.flops[id] = g.FLOPs(ir.ValueID(id))
	}
	return b, nil
}

// Bounds is KernelBounds of the Bounder's graph on lm.
func (b *Bounder) Bounds(lm *mesh.LogicalMesh) []float64 {
	g, cm, fu := b.g, b.cm, b.fu
	out := make([]float64, len(g.Values))
	for id := range g.Values {
		v := &g.Values[id]
		r := b.rules[id]
		k := maxShards(g, lm, cm, fu, ir.ValueID(id), r)
		n := float64(k)
		var bytes float64 // a device's share, at least 1/k of each tensor
		if fu.writes(ir.ValueID(id)) {
			bytes = float64(v.Type.Bytes()) / n
		}
		dt := v.Type.DType
		for i, a := range v.Args {
			t := g.Value(a).Type
			if fu.reads(ir.ValueID(id), i) {
				b := float64(t.Bytes()) / n
				if s := fu.readScale(ir.ValueID(id), i); s != 1 {
					b = math.Floor(b * s) // as operandBytes rounds its scaled shares down
				}
				bytes += b
			}
			if i == 0 {
				dt = t.DType // as enumerator.computeDType
			}
		}
		out[id] = cm.compute(v.Op, OpClass(v.Op, r.dims), dt, b.flops[id], k, bytes, lm.HostDevices(), !fu.launches(ir.ValueID(id)))
	}
	return out
}

// maxShards is the most devices any strategy of value id on lm splits its op over: the
// largest lm.AxisSize of the axes an assignment of the enumerator (strategiesOf, the only
// source of strategies) gives its labels. It is lm.Size() when the dims take both axes,
// and less where no dim is divisible by an axis (a 7-host submesh under power-of-two
// tensors, a batch smaller than the mesh): every strategy of the op then does at least
// FLOPs/maxShards of the work on a device and holds at least 1/maxShards of each operand
// and result, since an operand's dims carry only axes of the assignment.
func maxShards(g *ir.Graph, lm *mesh.LogicalMesh, cm costModel, fu *fusion, id ir.ValueID, r rule) int {
	v := g.Value(id)
	e := &enumerator{g: g, lm: lm, cm: cm, fu: fu, id: id, v: v, r: r}
	k := 1
	for _, a := range e.assignments() {
		var used mesh.AxisSet
		for _, ax := range a {
			used |= ax
		}
		k = max(k, lm.AxisSize(used))
	}
	return k
}
