package codegen

import (
	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/mesh"
	"github.com/autopar/autopar/program"
)

// batchNormSync is batch_norm on a shard of the batch (dim 0 split on axes): synchronized
// batch norm. The channel statistics are those of the whole batch: each device takes the
// mean over its shard, an all-reduce over axes sums the shards' means (equal shards, so
// their mean is the batch's), and the same for the biased variance around that mean, in
// the serial kernel's two passes. As instructions, with s the axes but the channel's and
// n the shards:
//
//	mu = all_reduce(reduce_mean(x, s)) · 1/n                   xc = x − bcast(mu)
//	var = all_reduce(reduce_mean(xc·xc, s)) · 1/n
//	y = xc · bcast(rsqrt(var + eps)) · bcast(gamma) + bcast(beta)
//
// The two all-reduces are those the sharding pass priced (ir.OpDef.SyncStats).
func (em *stageEm) batchNormSync(k key, local ir.Type, args [][]program.BufferID, axes mesh.AxisSet) []program.BufferID {
	val := em.l.g.Value(k.v)
	base := em.name(k)
	rank := len(local.Shape)
	var stat []int
	for d := range rank {
		if d != 1 {
			stat = append(stat, d)
		}
	}
	ch := ir.Type{DType: local.DType, Shape: ir.Shape{local.Shape[1]}}
	compute := em.computeEach
	n := float64(em.m.AxisSize(axes))
	// stat is the batch's mean over s of t, of the local shards of x.
	statOf := func(name string, t []program.BufferID) []program.BufferID {
		part := compute(name, ch, ir.OpReduceMean, ir.Attrs{}.With("axes", stat), t)
		em.each(func(d int) program.Instr {
			return program.Instr{Kind: program.AllReduce, Out: program.NoBuffer, Args: []program.BufferID{part[d]},
				Group: em.group(axes, d), Note: val.Name}
		})
		return em.scale(part, ch, 1/n, name+".global")
	}
	bcast := ir.Attrs{}.With("dims", []int{1}).With("shape", []int(local.Shape.Clone()))
	x, gamma, beta := args[0], args[1], args[2]
	mu := statOf(base+".mean", x)
	mub := compute(base+".meanb", local, ir.OpBroadcast, bcast, mu)
	em.free(mu)
	xc := compute(base+".xc", local, ir.OpSub, nil, x, mub)
	em.free(mub)
	xc2 := compute(base+".xc2", local, ir.OpMul, nil, xc, xc)
	vr := statOf(base+".var", xc2)
	em.free(xc2)
	eps := em.newBuf(base+".eps", ir.Type{DType: local.DType})
	em.each(func(d int) program.Instr {
		return program.Instr{Kind: program.Constant, Out: eps[d], Value: val.Attrs.Float("eps")}
	})
	ve := compute(base+".vareps", ch, ir.OpAdd, nil, vr, eps)
	em.free(vr, eps)
	rstd := compute(base+".rstd", ch, ir.OpRsqrt, nil, ve)
	em.free(ve)
	rstdb := compute(base+".rstdb", local, ir.OpBroadcast, bcast, rstd)
	em.free(rstd)
	xhat := compute(base+".xhat", local, ir.OpMul, nil, xc, rstdb)
	em.free(xc, rstdb)
	gb := compute(base+".gammab", local, ir.OpBroadcast, bcast, gamma)
	scaled := compute(base+".scaled", local, ir.OpMul, nil, xhat, gb)
	em.free(xhat, gb)
	bb := compute(base+".betab", local, ir.OpBroadcast, bcast, beta)
	y := compute(base, local, ir.OpAdd, nil, scaled, bb)
	em.free(scaled, bb)
	return y
}
