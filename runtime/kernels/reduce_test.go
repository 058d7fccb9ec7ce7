package kernels

import (
	"math"
	"testing"

	"github.com/autopar/autopar/ir"
	"github.com/stretchr/testify/require"
)

func TestReduce(t *testing.T) {
	x := vals(typ(ir.F64, 2, 3), 1, 5, 3, 4, 2, 6)
	tests := []struct {
		op   ir.Op
		axes []int
		want []float64
	}{
		{ir.OpReduceSum, []int{0}, []float64{5, 7, 9}},
		{ir.OpReduceSum, []int{1}, []float64{9, 12}},
		{ir.OpReduceSum, []int{0, 1}, []float64{21}},
		{ir.OpReduceMax, []int{0}, []float64{4, 5, 6}},
		{ir.OpReduceMax, []int{1}, []float64{5, 6}},
		{ir.OpReduceMean, []int{0}, []float64{2.5, 3.5, 4.5}},
		{ir.OpReduceMean, []int{0, 1}, []float64{3.5}},
	}
	for _, tt := range tests {
		t.Run(tt.op.String(), func(t *testing.T) {
			requireClose(t, tt.want, eval(t, tt.op, ir.Attrs{}.With("axes", tt.axes), x), 1e-12)
		})
	}
	requireClose(t, []float64{4, 5, 6}, eval(t, ir.OpReduceMax, ir.Attrs{}.With("axes", []int{0}), vals(typ(ir.I32, 2, 3), 1, 5, 3, 4, 2, 6)), 0)
}

// TestReduceRandom checks every axis subset of a rank-4 tensor against a direct sum.
func TestReduceRandom(t *testing.T) {
	r := rngFor(4)
	s := ir.Shape{2, 3, 1, 4}
	x := randT(r, typ(ir.F64, s...))
	for mask := 1; mask < 16; mask++ {
		var axes []int
		var keep ir.Shape
		for d := range 4 {
			if mask&(1<<d) != 0 {
				axes = append(axes, d)
			} else {
				keep = append(keep, s[d])
			}
		}
		for _, op := range []ir.Op{ir.OpReduceSum, ir.OpReduceMax, ir.OpReduceMean} {
			want := make([]float64, keep.NumElements())
			cnt := make([]int, len(want))
			for i := range want {
				want[i] = math.Inf(-1)
				if op != ir.OpReduceMax {
					want[i] = 0
				}
			}
			for i := range x.Len() {
				idx := unflatten(i, s)
				o := 0
				for d := range 4 {
					if mask&(1<<d) == 0 {
						o = o*s[d] + idx[d]
					}
				}
				cnt[o]++
				if op == ir.OpReduceMax {
					want[o] = math.Max(want[o], x.At(i))
				} else {
					want[o] += x.At(i)
				}
			}
			if op == ir.OpReduceMean {
				for i := range want {
					want[i] /= float64(cnt[i])
				}
			}
			requireClose(t, want, eval(t, op, ir.Attrs{}.With("axes", axes), x), 1e-12)
		}
	}
}

func TestSoftmaxFamily(t *testing.T) {
	x := vals(typ(ir.F64, 2, 3), 1, 2, 3, 1000, 1000, 1000)
	e := []float64{math.Exp(-2), math.Exp(-1), 1}
	s := e[0] + e[1] + e[2]
	ax1 := ir.Attrs{}.With("axis", 1)
	requireClose(t, []float64{e[0] / s, e[1] / s, e[2] / s, 1. / 3, 1. / 3, 1. / 3}, eval(t, ir.OpSoftmax, ax1, x), 1e-12)
	requireClose(t, []float64{-2 - math.Log(s), -1 - math.Log(s), -math.Log(s), -math.Log(3), -math.Log(3), -math.Log(3)},
		eval(t, ir.OpLogSoftmax, ax1, x), 1e-12)
	requireClose(t, []float64{1, 3, 6, 1000, 2000, 3000}, eval(t, ir.OpCumsum, ax1, x), 0)
	requireClose(t, []float64{1, 2, 3, 1001, 1002, 1003}, eval(t, ir.OpCumsum, ir.Attrs{}.With("axis", 0), x), 0)
	// softmax along axis 0 of a [2,3] is per column.
	col := eval(t, ir.OpSoftmax, ir.Attrs{}.With("axis", 0), vals(typ(ir.F32, 2, 3), 0, 0, 0, 0, math.Log(3), 1000))
	requireClose(t, []float64{0.5, 0.25, 0, 0.5, 0.75, 1}, col, 1e-6)
}

func TestLayerNorm(t *testing.T) {
	x := vals(typ(ir.F64, 2, 4), 1, 2, 3, 4, -1, -1, 1, 1)
	g := vals(typ(ir.F64, 4), 1, 2, 1, 1)
	b := vals(typ(ir.F64, 4), 0, 0, 0, 10)
	eps := 1e-5
	// row 1: mean 2.5, var 1.25; row 2: mean 0, var 1.
	s1, s2 := 1/math.Sqrt(1.25+eps), 1/math.Sqrt(1+eps)
	want := []float64{-1.5 * s1, -0.5 * s1 * 2, 0.5 * s1, 1.5*s1 + 10, -s2, -2 * s2, s2, s2 + 10}
	requireClose(t, want, eval(t, ir.OpLayerNorm, ir.Attrs{}.With("eps", eps), x, g, b), 1e-12)
}

func TestBatchNorm(t *testing.T) {
	r := rngFor(5)
	x := randT(r, typ(ir.F64, 3, 2, 2, 2))
	g := vals(typ(ir.F64, 2), 2, 0.5)
	b := vals(typ(ir.F64, 2), 1, -1)
	got := eval(t, ir.OpBatchNorm, ir.Attrs{}.With("eps", 1e-3), x, g, b)
	for c := range 2 {
		var sum, sq float64
		var idx []int
		for i := range x.Len() {
			if unflatten(i, x.Type.Shape)[1] == c {
				idx = append(idx, i)
				sum += x.At(i)
			}
		}
		mean := sum / 12
		for _, i := range idx {
			sq += (x.At(i) - mean) * (x.At(i) - mean)
		}
		inv := 1 / math.Sqrt(sq/12+1e-3)
		for _, i := range idx {
			require.InDelta(t, (x.At(i)-mean)*inv*g.At(c)+b.At(c), got.At(i), 1e-12)
		}
	}
	// The 2-D form normalizes columns.
	x2 := vals(typ(ir.F32, 2, 2), 1, 10, 3, 10)
	got2 := eval(t, ir.OpBatchNorm, ir.Attrs{}.With("eps", 1e-5), x2, vals(typ(ir.F32, 2), 1, 1), vals(typ(ir.F32, 2), 0, 0))
	requireClose(t, []float64{-1 / math.Sqrt(1+1e-5), 0, 1 / math.Sqrt(1+1e-5), 0}, got2, 1e-6)
}

// A batch_norm with a group takes each block of group rows' own statistics: it equals
// batch_norm over each block alone (the micro-batches of a pipeline).
func TestBatchNormGroup(t *testing.T) {
	r := rngFor(6)
	for _, dt := range []ir.DType{ir.F64, ir.F32} {
		x := randT(r, typ(dt, 6, 2, 2, 3))
		g, b := vals(typ(dt, 2), 2, 0.5), vals(typ(dt, 2), 1, -1)
		got := eval(t, ir.OpBatchNorm, ir.Attrs{}.With("eps", 1e-3).With("group", 2), x, g, b)
		block := x.Len() / 3
		for blk := range 3 {
			part := make([]float64, block)
			for i := range part {
				part[i] = x.At(blk*block + i)
			}
			want := eval(t, ir.OpBatchNorm, ir.Attrs{}.With("eps", 1e-3), vals(typ(dt, 2, 2, 2, 3), part...), g, b)
			for i := range block {
				require.InDelta(t, want.At(i), got.At(blk*block+i), 1e-5, "%s block %d element %d", dt, blk, i)
			}
		}
		// The whole dim as the group is the plain batch_norm.
		whole := eval(t, ir.OpBatchNorm, ir.Attrs{}.With("eps", 1e-3).With("group", 6), x, g, b)
		plain := eval(t, ir.OpBatchNorm, ir.Attrs{}.With("eps", 1e-3), x, g, b)
		for i := range x.Len() {
			require.Equal(t, plain.At(i), whole.At(i))
		}
	}
	_, err := evalInfer(ir.OpBatchNorm, ir.Attrs{}.With("eps", 1e-3).With("group", 4), randT(r, typ(ir.F64, 6, 2)), vals(typ(ir.F64, 2), 1, 1), vals(typ(ir.F64, 2), 0, 0))
	require.ErrorContains(t, err, "group 4 must be a positive divisor of dim 0")
}
