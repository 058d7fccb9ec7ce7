package kernels

import (
	"math"
	"testing"

	"github.com/autopar/autopar/ir"
	"github.com/stretchr/testify/require"
)

func TestBinaryBroadcast(t *testing.T) {
	a := vals(typ(ir.F32, 2, 3), 1, 2, 3, 4, 5, 6)
	row := vals(typ(ir.F32, 3), 10, 20, 30)
	col := vals(typ(ir.F32, 2, 1), 100, 200)
	sc := vals(typ(ir.F32), 2)
	tests := []struct {
		name string
		op   ir.Op
		x, y *Tensor
		want []float64
	}{
		{"add same", ir.OpAdd, a, a, []float64{2, 4, 6, 8, 10, 12}},
		{"add row", ir.OpAdd, a, row, []float64{11, 22, 33, 14, 25, 36}},
		{"sub col", ir.OpSub, a, col, []float64{-99, -98, -97, -196, -195, -194}},
		{"mul scalar", ir.OpMul, sc, a, []float64{2, 4, 6, 8, 10, 12}},
		{"div row", ir.OpDiv, row, a, []float64{10, 10, 10, 2.5, 4, 5}},
		{"max col row", ir.OpMax, col, row, []float64{100, 100, 100, 200, 200, 200}},
		{"outer col row", ir.OpMul, col, row, []float64{1000, 2000, 3000, 2000, 4000, 6000}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			requireClose(t, tt.want, eval(t, tt.op, nil, tt.x, tt.y), 0)
		})
	}
}

// TestBinaryBroadcastRandom checks rank-4 broadcasting against index arithmetic.
func TestBinaryBroadcastRandom(t *testing.T) {
	r := rngFor(1)
	shapes := [][2]ir.Shape{{{2, 1, 4, 1}, {3, 1, 5}}, {{1, 3, 1, 5}, {2, 1, 4, 1}}, {{5}, {2, 3, 4, 5}}, {{2, 3, 4, 5}, {1, 1, 1, 1}}}
	for _, s := range shapes {
		for _, dt := range []ir.DType{ir.F32, ir.F64, ir.I64} {
			x, y := randT(r, ir.Type{DType: dt, Shape: s[0]}), randT(r, ir.Type{DType: dt, Shape: s[1]})
			got := eval(t, ir.OpSub, nil, x, y)
			out := got.Type.Shape
			for i := range got.Len() {
				idx := unflatten(i, out)
				want := x.At(flatBroadcast(idx, s[0])) - y.At(flatBroadcast(idx, s[1]))
				require.InDelta(t, want, got.At(i), 1e-6, "%s %v %v at %v", dt, s[0], s[1], idx)
			}
		}
	}
}

func unflatten(i int, s ir.Shape) []int {
	idx := make([]int, len(s))
	for d := len(s) - 1; d >= 0; d-- {
		idx[d] = i % s[d]
		i /= s[d]
	}
	return idx
}

// flatBroadcast maps an output index to the flat index of an operand of shape s.
func flatBroadcast(idx []int, s ir.Shape) int {
	off, f := len(idx)-len(s), 0
	for d, n := range s {
		i := idx[off+d]
		if n == 1 {
			i = 0
		}
		f = f*n + i
	}
	return f
}

func TestIntArith(t *testing.T) {
	a := vals(typ(ir.I32, 4), 7, -7, 2147483647, 9)
	b := vals(typ(ir.I32, 4), 2, 2, 1, 3)
	requireClose(t, []float64{3, -3, 2147483647, 3}, eval(t, ir.OpDiv, nil, a, b), 0)
	requireClose(t, []float64{9, -5, -2147483648, 12}, eval(t, ir.OpAdd, nil, a, b), 0) // i32 wraps
	_, err := evalInfer(ir.OpDiv, nil, a, vals(typ(ir.I32, 4), 1, 0, 1, 1))
	require.ErrorContains(t, err, "division by zero")
}

func TestCompareWhere(t *testing.T) {
	a := vals(typ(ir.F64, 4), 1, 2, 3, math.NaN())
	b := vals(typ(ir.F64), 2)
	tests := []struct {
		op   ir.Op
		want []float64
	}{
		{ir.OpEq, []float64{0, 1, 0, 0}}, {ir.OpNe, []float64{1, 0, 1, 1}}, {ir.OpLt, []float64{1, 0, 0, 0}},
		{ir.OpLe, []float64{1, 1, 0, 0}}, {ir.OpGt, []float64{0, 0, 1, 0}}, {ir.OpGe, []float64{0, 1, 1, 0}},
	}
	for _, tt := range tests {
		t.Run(tt.op.String(), func(t *testing.T) {
			got := eval(t, tt.op, nil, a, b)
			require.Equal(t, ir.Bool, got.Type.DType)
			requireClose(t, tt.want, got, 0)
		})
	}
	cond := vals(typ(ir.Bool, 2, 1), 1, 0)
	x := vals(typ(ir.F32, 2, 2), 1, 2, 3, 4)
	y := vals(typ(ir.F32), -1)
	requireClose(t, []float64{1, 2, -1, -1}, eval(t, ir.OpWhere, nil, cond, x, y), 0)
}

func TestUnary(t *testing.T) {
	in := []float64{-2, -0.5, 0, 0.5, 3}
	tests := []struct {
		op ir.Op
		f  func(float64) float64
	}{
		{ir.OpNeg, func(x float64) float64 { return -x }},
		{ir.OpExp, math.Exp},
		{ir.OpTanh, math.Tanh},
		{ir.OpRelu, func(x float64) float64 { return math.Max(x, 0) }},
		{ir.OpGelu, func(x float64) float64 { return x * 0.5 * math.Erfc(-x/math.Sqrt2) }},
		{ir.OpSigmoid, func(x float64) float64 { return 1 / (1 + math.Exp(-x)) }},
	}
	for _, tt := range tests {
		for _, dt := range []ir.DType{ir.F32, ir.F64} {
			t.Run(tt.op.String()+"/"+dt.String(), func(t *testing.T) {
				want := make([]float64, len(in))
				for i, x := range in {
					want[i] = tt.f(x)
				}
				requireClose(t, want, eval(t, tt.op, nil, vals(typ(dt, 5), in...)), 1e-6)
			})
		}
	}
	pos := []float64{0.25, 1, 4}
	requireClose(t, []float64{math.Log(0.25), 0, math.Log(4)}, eval(t, ir.OpLog, nil, vals(typ(ir.F64, 3), pos...)), 1e-12)
	requireClose(t, []float64{0.5, 1, 2}, eval(t, ir.OpSqrt, nil, vals(typ(ir.F64, 3), pos...)), 1e-12)
	requireClose(t, []float64{2, 1, 0.5}, eval(t, ir.OpRsqrt, nil, vals(typ(ir.F64, 3), pos...)), 1e-12)
	requireClose(t, []float64{2, -3}, eval(t, ir.OpNeg, nil, vals(typ(ir.I64, 2), -2, 3)), 0)
}

func TestCast(t *testing.T) {
	in := []float64{-1.75, 0, 0.5, 3.0000001, 70000}
	tests := []struct {
		to   ir.DType
		want []float64
	}{
		{ir.F64, []float64{-1.75, 0, 0.5, float64(float32(3.0000001)), 70000}},
		{ir.I32, []float64{-1, 0, 0, 3, 70000}},
		{ir.Bool, []float64{1, 0, 1, 1, 1}},
		{ir.F16, []float64{-1.75, 0, 0.5, 3, math.Inf(1)}},
		{ir.BF16, []float64{-1.75, 0, 0.5, 3, 70144}},
	}
	x := vals(typ(ir.F32, 5), in...)
	for _, tt := range tests {
		t.Run(tt.to.String(), func(t *testing.T) {
			got := eval(t, ir.OpCast, ir.Attrs{}.With("to", tt.to), x)
			require.Equal(t, tt.to, got.Type.DType)
			requireClose(t, tt.want, got, 0)
		})
	}
	b := eval(t, ir.OpCast, ir.Attrs{}.With("to", ir.F64), vals(typ(ir.Bool, 2), 1, 0))
	requireClose(t, []float64{1, 0}, b, 0)
}

func TestRounding(t *testing.T) {
	tests := []struct {
		in, f16, bf16 float64
	}{
		{1, 1, 1},
		{1 + 0x1p-11, 1, 1},                      // tie to even in f16
		{1 + 3*0x1p-11, 1 + 0x1p-9, 1},           // tie rounds up to even
		{65504, 65504, 65536},                    // largest half
		{65519, 65504, 65536},                    // below the overflow midpoint
		{0x1p-25, 0, 0x1p-25},                    // half the smallest subnormal: ties to 0
		{3 * 0x1p-26, 0x1p-24, 3 * 0x1p-26},      // above half rounds to the subnormal
		{1 + 0x1p-8, 1 + 0x1p-8, 1},              // bf16 tie to even
		{1 + 3*0x1p-8, 1 + 3*0x1p-8, 1 + 0x1p-6}, // bf16 tie up
		{-2.5e-3, -1311 * 0x1p-19, -164 * 0x1p-16},
	}
	for _, tt := range tests {
		require.Equal(t, float32(tt.f16), roundF16(float32(tt.in)), "f16 of %g", tt.in)
		require.InDelta(t, tt.bf16, float64(roundBF16(float32(tt.in))), 1e-12, "bf16 of %g", tt.in)
	}
	require.True(t, math.IsNaN(float64(roundF16(float32(math.NaN())))))
}

func TestDropout(t *testing.T) {
	x := New(typ(ir.F32, 64, 64))
	for i := range x.F32 {
		x.F32[i] = 1
	}
	at := ir.Attrs{}.With("rate", 0.25).With("seed", 7)
	a, b := eval(t, ir.OpDropout, at, x), eval(t, ir.OpDropout, at, x)
	require.Equal(t, a.F32, b.F32, "same seed, same mask")
	c := eval(t, ir.OpDropout, at.With("seed", 8), x)
	require.NotEqual(t, a.F32, c.F32)
	kept := 0
	for i, v := range a.F32 {
		require.Contains(t, []float32{0, 1 / 0.75}, v)
		require.Equal(t, DropoutKeep(7, i, 0.25), v != 0)
		if v != 0 {
			kept++
		}
	}
	require.InDelta(t, 0.75, float64(kept)/4096, 0.03)

	// A shard draws the same mask as the whole tensor at the same global elements.
	sh, err := Eval(ir.OpSlice, ir.Attrs{}.With("start", []int{16, 8}).With("limit", []int{48, 40}), typ(ir.F32, 32, 32), []*Tensor{x})
	require.NoError(t, err)
	d, err := DropoutShard(sh, 0.25, 7, ir.Shape{64, 64}, []int{16, 8})
	require.NoError(t, err)
	for i := range 32 {
		for j := range 32 {
			require.Equal(t, a.F32[(16+i)*64+8+j], d.F32[i*32+j])
		}
	}
	_, err = DropoutShard(sh, 0.25, 7, ir.Shape{64, 64}, []int{40, 0})
	require.ErrorContains(t, err, "does not fit")
}

func TestEvalChecks(t *testing.T) {
	a := vals(typ(ir.F32, 2), 1, 2)
	tests := []struct {
		name string
		run  func() error
		want string
	}{
		{"wrong out", func() error { _, err := Eval(ir.OpAdd, nil, typ(ir.F32, 3), []*Tensor{a, a}); return err }, "result type is f32[3]"},
		{"shapes", func() error {
			_, err := Eval(ir.OpAdd, nil, typ(ir.F32, 2), []*Tensor{a, New(typ(ir.F32, 3))})
			return err
		}, "do not broadcast"},
		{"storage", func() error {
			_, err := Eval(ir.OpNeg, nil, typ(ir.F64, 2), []*Tensor{{Type: typ(ir.F64, 2), F32: []float32{1, 2}}})
			return err
		}, "does not hold"},
		{"nil", func() error { _, err := Eval(ir.OpNeg, nil, typ(ir.F32, 2), []*Tensor{nil}); return err }, "operand 0 is nil"},
		{"arity", func() error { _, err := Eval(ir.OpAdd, nil, typ(ir.F32, 2), []*Tensor{a}); return err }, "wants 2 operands"},
		{"leaf", func() error { _, err := Eval(ir.OpParam, nil, typ(ir.F32, 2), nil); return err }, "no kernel"},
		{"invalid op", func() error { _, err := Eval(ir.Op(250), nil, typ(ir.F32, 2), nil); return err }, "not in the op table"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { require.ErrorContains(t, tt.run(), tt.want) })
	}
}

func TestLeafKernels(t *testing.T) {
	c := eval(t, ir.OpConstant, ir.Attrs{}.With("value", 1.5).With("type", typ(ir.I64, 2, 2)))
	requireClose(t, []float64{1, 1, 1, 1}, c, 0)
	io := eval(t, ir.OpIota, ir.Attrs{}.With("axis", 1).With("type", typ(ir.F32, 2, 3)))
	requireClose(t, []float64{0, 1, 2, 0, 1, 2}, io, 0)
}

// TestCastAllPairs casts between every pair of dtypes; the result must be what Set stores
// for the source's values (Set is the documented conversion), and casting to a dtype and
// back to f64 must be exact where the value is representable.
func TestCastAllPairs(t *testing.T) {
	dts := []ir.DType{ir.F32, ir.F16, ir.BF16, ir.F64, ir.I32, ir.I64, ir.Bool}
	src := []float64{-2.75, 0, 1, 3.5, 1e6 + 0.5}
	for _, from := range dts {
		x := vals(typ(from, len(src)), src...)
		for _, to := range dts {
			t.Run(from.String()+"->"+to.String(), func(t *testing.T) {
				got := eval(t, ir.OpCast, ir.Attrs{}.With("to", to), x)
				want := vals(typ(to, len(src)), x.Float64s()...)
				require.Equal(t, want.Float64s(), got.Float64s())
			})
		}
	}
}
