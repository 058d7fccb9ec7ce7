package autopar

import (
	"context"
	"errors"

	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/mesh"
	"github.com/autopar/autopar/passes/sharding"
)

// The data instructions. Beside one kernel per op, codegen emits instructions that move
// or make data: loads (the params and optimizer state in the prologue, each micro-batch's
// slice of the data inputs), stores (the step's outputs — the loss and the gradients —
// and the new params and state), constants (each micro-batch's, the update's, the
// accumulators' zeros and the 1/B factors of their mean; an iota, made from constants) and
// the accumulation of each
// gradient over the micro-batches (an add in place, and the mean's multiply once per
// step). The sharding ILP does not see them (they do not depend on an op's strategy
// beyond the bytes of its layout), so the stage's price adds them after the solve
// (stageGraph.solve): per micro-batch to the stage's time, once per step to its step part
// (sharding.Cost.Data holds both; the summary counts them as compute).
//
// Each is priced as a roofline of the bytes it moves plus KernelOverhead (the runtime's
// dispatch of one instruction): a load or a store reads and writes its block, a constant
// writes its buffer, an accumulation and the mean's multiply run the vector kernel they
// are. Clusters that fuse elementwise chains (the GPU presets) price none of them: they
// describe frameworks that keep params and state resident on the device, fold constants
// into kernels and fuse the accumulation into the weight-gradient GEMM.
//
// The mean's factor and multiply are priced at every micro-batch count, though codegen
// skips them at one: a stage's solution is shared by the counts (its price cannot depend
// on B), and they are two instructions per gradient.

// dataTime is what one device of the stage spends on data instructions under res's
// layouts: per micro-batch and once per step.
func (sg *stageGraph) dataTime(c *mesh.Cluster, res *sharding.Result) (perMB, perStep float64) {
	return sg.dataTimeOf(c, func(i int) float64 {
		v := &sg.g.Values[i]
		b, err := res.Mesh.LocalBytes(v.Type.Shape, v.Type.DType.Size(), res.Specs[i])
		if err != nil {
			return 0
		}
		return float64(b)
	})
}

// dataBound is a lower bound of dataTime on any layout over n devices: each value's bytes
// spread evenly (the roofline grows with the bytes). On one device it is dataTime.
func (sg *stageGraph) dataBound(c *mesh.Cluster, n int) (perMB, perStep float64) {
	return sg.dataTimeOf(c, func(i int) float64 { return float64(sg.g.Values[i].Type.Bytes()) / float64(n) })
}

// dataTimeOf is dataTime with value i's local bytes bytes(i).
func (sg *stageGraph) dataTimeOf(c *mesh.Cluster, bytes func(i int) float64) (perMB, perStep float64) {
	if c == nil || c.FuseElementwise {
		return 0, 0
	}
	g := sg.g
	move := func(b float64) float64 { return c.OpTime(mesh.ClassVector, mesh.F32, 0, 2*b) }
	fill := func(b float64) float64 { return c.OpTime(mesh.ClassVector, mesh.F32, 0, b) }
	add := func(i int) float64 { // an add of two tensors of value i's layout
		v := &g.Values[i]
		b := bytes(i)
		return c.OpTime(mesh.ClassVector, precision(v.Type.DType), b/float64(max(1, v.Type.DType.Size())), 3*b)
	}
	// An iota is made as codegen makes it (in f64: ones, their cumsum, less one, a cast).
	iota := func(i int, b float64) float64 {
		n := b / float64(max(1, g.Values[i].Type.DType.Size()))
		f := 8 * n
		return fill(f) + c.OpTime(mesh.ClassReduce, mesh.F32, n, 2*f) + c.OpTime(mesh.ClassVector, mesh.F32, n, 3*f) +
			c.OpTime(mesh.ClassVector, mesh.F32, 0, f+b)
	}
	perMBConst, stepConst := sg.constantUses()
	for i := range g.Values {
		v := &g.Values[i]
		switch {
		case v.Op == ir.OpInput && sg.feed[i]:
			perMB += move(bytes(i))
		case v.Op == ir.OpParam || v.Op == ir.OpState:
			perStep += move(bytes(i))
		case v.Op == ir.OpConstant || v.Op == ir.OpIota:
			t := fill(bytes(i))
			if v.Op == ir.OpIota {
				t = iota(i, bytes(i))
			}
			if perMBConst[i] {
				perMB += t
			}
			if stepConst[i] {
				perStep += t
			}
		}
		if sg.acc[i] {
			perMB += add(i)                                       // accumulate
			perStep += 2*fill(bytes(i)) + add(i) + move(bytes(i)) // zeros, 1/B, the mean's mul, the store
		}
	}
	for _, u := range g.Updates {
		perStep += move(bytes(int(u.Value))) // the new param or state stored
	}
	return perMB, perStep
}

// precision is the arithmetic a kernel on dt runs in (passes/sharding's rule).
func precision(dt ir.DType) mesh.Precision {
	if dt == ir.F16 || dt == ir.BF16 {
		return mesh.F16
	}
	return mesh.F32
}

// constantUses says which constants of the stage a micro-batch block makes (read by a
// forward or backward op) and which the update makes (read by an op of the update).
func (sg *stageGraph) constantUses() (perMB, perStep []bool) {
	g := sg.g
	perMB, perStep = make([]bool, len(g.Values)), make([]bool, len(g.Values))
	for j := range g.Values {
		for _, a := range g.Values[j].Args {
			if op := g.Value(a).Op; op != ir.OpConstant && op != ir.OpIota {
				continue
			}
			if sg.once[j] {
				perStep[a] = true
			} else {
				perMB[a] = true
			}
		}
	}
	return perMB, perStep
}

// solve is sharding.Solve on the stage's graph with the stage's data instructions
// (dataTime) in the result's cost (Data, and Total), as every price of a stage has them;
// so has the plan of least memory a *sharding.MemoryError carries (compose.go's lean
// points use it).
func (sg *stageGraph) solve(ctx context.Context, lm *mesh.LogicalMesh, opts sharding.Options) (*sharding.Result, error) {
	res, err := sharding.Solve(ctx, sg.g, lm, opts)
	var me *sharding.MemoryError
	if errors.As(err, &me) && me.Plan != nil {
		sg.addData(opts.Cluster, me.Plan)
	}
	if res != nil && err == nil {
		sg.addData(opts.Cluster, res)
	}
	return res, err
}

func (sg *stageGraph) addData(c *mesh.Cluster, res *sharding.Result) {
	mb, step := sg.dataTime(c, res)
	res.Cost.Data = mb + step
	res.Cost.Total += res.Cost.Data
}
