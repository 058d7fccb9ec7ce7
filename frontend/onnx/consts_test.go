package onnx

import (
	"context"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/runtime/interp"
	"github.com/autopar/autopar/runtime/kernels"
)

// Each known tensor of a form the IR can build is rebuilt from ops that compute exactly it;
// any other is an error naming it.
func TestMaterialize(t *testing.T) {
	tensor := func(dt ir.DType, shape ir.Shape, f func(idx []int) float64) *kernels.Tensor {
		x := kernels.New(ir.Type{DType: dt, Shape: shape})
		idx := make([]int, len(shape))
		for i := range x.Len() {
			coords(shape, i, idx)
			x.Set(i, f(idx))
		}
		return x
	}
	cases := map[string]*kernels.Tensor{
		"uniform":        tensor(ir.F32, ir.Shape{3, 2}, func([]int) float64 { return -2.5 }),
		"arange":         tensor(ir.I64, ir.Shape{1, 8}, func(i []int) float64 { return float64(i[1]) }),
		"arange step":    tensor(ir.F32, ir.Shape{5, 2}, func(i []int) float64 { return 3 - 0.5*float64(i[0]) }),
		"tril":           tensor(ir.Bool, ir.Shape{1, 1, 6, 6}, func(i []int) float64 { return b(i[3] <= i[2]) }),
		"not tril":       tensor(ir.Bool, ir.Shape{6, 6}, func(i []int) float64 { return b(i[1] > i[0]) }),
		"band offset":    tensor(ir.Bool, ir.Shape{4, 7}, func(i []int) float64 { return b(i[1] <= i[0]+2) }),
		"additive mask":  tensor(ir.F32, ir.Shape{5, 5}, func(i []int) float64 { return map[bool]float64{true: 0, false: math.Inf(-1)}[i[1] <= i[0]] }),
		"triu -1 offset": tensor(ir.I64, ir.Shape{3, 5, 5}, func(i []int) float64 { return b(i[2] > i[1]-1) }),
	}
	for name, want := range cases {
		t.Run(name, func(t *testing.T) {
			im := newImporter("m.onnx", ir.NewGraph("g"), 17)
			id, err := im.materialize(&val{id: ir.NoValue, c: want, onnx: "c"})
			require.NoError(t, err)
			require.True(t, im.g.Value(id).Type.Equal(want.Type), "%s vs %s", im.g.Value(id).Type, want.Type)
			im.g.AddOutput(id, ir.Pos{})
			res, err := interp.Run(context.Background(), im.g, interp.Feeds{})
			require.NoError(t, err)
			for i := range want.Len() {
				require.Equal(t, want.At(i), res.Outputs[0].At(i), "element %d", i)
			}
		})
	}
	im := newImporter("m.onnx", ir.NewGraph("g"), 17)
	_, err := im.materialize(&val{id: ir.NoValue, c: kernels.FromF64(ir.F32, ir.Shape{3}, []float64{1, 5, 2}), onnx: "onnx::Mul_7"})
	require.ErrorContains(t, err, `tensor "onnx::Mul_7" (f32[3]) is known at import time but is neither uniform, an arange nor a triangular mask`)
}

func b(x bool) float64 {
	if x {
		return 1
	}
	return 0
}
