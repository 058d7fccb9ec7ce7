package kernels

import (
	"testing"

	"github.com/autopar/autopar/ir"
	"github.com/stretchr/testify/require"
)

func TestLayout(t *testing.T) {
	x := vals(typ(ir.I64, 2, 3), 0, 1, 2, 3, 4, 5)
	tests := []struct {
		name string
		op   ir.Op
		at   ir.Attrs
		args []*Tensor
		want []float64
	}{
		{"reshape", ir.OpReshape, ir.Attrs{}.With("shape", []int{3, 2}), []*Tensor{x}, []float64{0, 1, 2, 3, 4, 5}},
		{"transpose", ir.OpTranspose, ir.Attrs{}.With("perm", []int{1, 0}), []*Tensor{x}, []float64{0, 3, 1, 4, 2, 5}},
		{"broadcast new dim", ir.OpBroadcast, ir.Attrs{}.With("dims", []int{1, 2}).With("shape", []int{2, 2, 3}), []*Tensor{x},
			[]float64{0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5}},
		{"broadcast size 1", ir.OpBroadcast, ir.Attrs{}.With("dims", []int{0, 1}).With("shape", []int{2, 3}),
			[]*Tensor{vals(typ(ir.I64, 2, 1), 7, 8)}, []float64{7, 7, 7, 8, 8, 8}},
		{"broadcast middle", ir.OpBroadcast, ir.Attrs{}.With("dims", []int{1}).With("shape", []int{2, 3, 2}),
			[]*Tensor{vals(typ(ir.I64, 3), 1, 2, 3)}, []float64{1, 1, 2, 2, 3, 3, 1, 1, 2, 2, 3, 3}},
		{"slice", ir.OpSlice, ir.Attrs{}.With("start", []int{0, 1}).With("limit", []int{2, 3}), []*Tensor{x}, []float64{1, 2, 4, 5}},
		{"slice row", ir.OpSlice, ir.Attrs{}.With("start", []int{1, 0}).With("limit", []int{2, 3}), []*Tensor{x}, []float64{3, 4, 5}},
		{"concat 0", ir.OpConcat, ir.Attrs{}.With("axis", 0), []*Tensor{x, vals(typ(ir.I64, 1, 3), 9, 9, 9)}, []float64{0, 1, 2, 3, 4, 5, 9, 9, 9}},
		{"concat 1", ir.OpConcat, ir.Attrs{}.With("axis", 1), []*Tensor{x, vals(typ(ir.I64, 2, 1), 8, 9), x},
			[]float64{0, 1, 2, 8, 0, 1, 2, 3, 4, 5, 9, 3, 4, 5}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { requireClose(t, tt.want, eval(t, tt.op, tt.at, tt.args...), 0) })
	}
}

// TestTransposeRandom checks a rank-4 permutation against index arithmetic.
func TestTransposeRandom(t *testing.T) {
	x := randT(rngFor(6), typ(ir.F32, 2, 3, 4, 5))
	perm := []int{2, 0, 3, 1}
	got := eval(t, ir.OpTranspose, ir.Attrs{}.With("perm", perm), x)
	require.Equal(t, ir.Shape{4, 2, 5, 3}, got.Type.Shape)
	for i := range got.Len() {
		o := unflatten(i, got.Type.Shape)
		in := make([]int, 4)
		for d, p := range perm {
			in[p] = o[d]
		}
		require.Equal(t, x.At(((in[0]*3+in[1])*4+in[2])*5+in[3]), got.At(i))
	}
}

func TestResultsDoNotAlias(t *testing.T) {
	x := vals(typ(ir.F32, 4), 1, 2, 3, 4)
	y := eval(t, ir.OpReshape, ir.Attrs{}.With("shape", []int{2, 2}), x)
	y.F32[0] = 100
	require.Equal(t, float32(1), x.F32[0])
}
