package kernels

import (
	"testing"

	"github.com/autopar/autopar/ir"
	"github.com/stretchr/testify/require"
)

// argSpec is one operand of a sweep case: a shape and what fills it.
type argSpec struct {
	shape []int
	kind  byte // 'f' float N(0,1), 'p' float in [0.5, 2.5), 'i' i32 ids in [0, 3), 'b' bool
}

func f(s ...int) argSpec { return argSpec{s, 'f'} }
func p(s ...int) argSpec { return argSpec{s, 'p'} }
func i(s ...int) argSpec { return argSpec{s, 'i'} }
func b(s ...int) argSpec { return argSpec{s, 'b'} }

type sweepCase struct {
	op   ir.Op
	at   ir.Attrs
	args []argSpec
}

func at() ir.Attrs { return ir.Attrs{} }

// sweepCases holds one instance of every non-leaf op; TestPrecisionSweep checks that none
// is missing.
var sweepCases = []sweepCase{
	{ir.OpConstant, at().With("value", 0.3).With("type", typ(ir.F32, 2, 2)), nil},
	{ir.OpIota, at().With("axis", 0).With("type", typ(ir.F32, 3, 2)), nil},
	{ir.OpAdd, nil, []argSpec{f(3, 4), f(4)}},
	{ir.OpSub, nil, []argSpec{f(3, 1), f(1, 4)}},
	{ir.OpMul, nil, []argSpec{f(2, 3, 4), f(3, 1)}},
	{ir.OpDiv, nil, []argSpec{f(3, 4), p(3, 4)}},
	{ir.OpMax, nil, []argSpec{f(3, 4), f(3, 4)}},
	{ir.OpEq, nil, []argSpec{f(3, 4), f(3, 4)}},
	{ir.OpNe, nil, []argSpec{f(3, 4), f(4)}},
	{ir.OpLt, nil, []argSpec{f(3, 4), f(4)}},
	{ir.OpLe, nil, []argSpec{f(3, 4), f(3, 1)}},
	{ir.OpGt, nil, []argSpec{f(3, 4), f()}},
	{ir.OpGe, nil, []argSpec{f(3, 4), f(3, 4)}},
	{ir.OpWhere, nil, []argSpec{b(3, 4), f(3, 4), f(4)}},
	{ir.OpNeg, nil, []argSpec{f(5)}},
	{ir.OpExp, nil, []argSpec{f(5)}},
	{ir.OpLog, nil, []argSpec{p(5)}},
	{ir.OpTanh, nil, []argSpec{f(5)}},
	{ir.OpRelu, nil, []argSpec{f(5)}},
	{ir.OpGelu, nil, []argSpec{f(5)}},
	{ir.OpSigmoid, nil, []argSpec{f(5)}},
	{ir.OpSqrt, nil, []argSpec{p(5)}},
	{ir.OpRsqrt, nil, []argSpec{p(5)}},
	{ir.OpCast, at().With("to", ir.I32), []argSpec{f(5)}},
	{ir.OpDropout, at().With("rate", 0.3).With("seed", 5), []argSpec{f(6, 5)}},
	{ir.OpMatMul, nil, []argSpec{f(5, 7), f(7, 3)}},
	{ir.OpEinsum, at().With("spec", "bij,jk,bk->bi"), []argSpec{f(2, 3, 4), f(4, 5), f(2, 5)}},
	{ir.OpReduceSum, at().With("axes", []int{0, 2}), []argSpec{f(3, 4, 5)}},
	{ir.OpReduceMax, at().With("axes", []int{1}), []argSpec{f(3, 4, 5)}},
	{ir.OpReduceMean, at().With("axes", []int{2}), []argSpec{f(3, 4, 5)}},
	{ir.OpSoftmax, at().With("axis", 1), []argSpec{f(3, 4, 5)}},
	{ir.OpLogSoftmax, at().With("axis", 2), []argSpec{f(3, 4, 5)}},
	{ir.OpCumsum, at().With("axis", 0), []argSpec{f(3, 4)}},
	{ir.OpLayerNorm, nil, []argSpec{f(3, 4, 8), f(8), f(8)}},
	{ir.OpBatchNorm, nil, []argSpec{f(4, 3, 2, 2), f(3), f(3)}},
	{ir.OpReshape, at().With("shape", []int{6, 2}), []argSpec{f(3, 4)}},
	{ir.OpTranspose, at().With("perm", []int{2, 0, 1}), []argSpec{f(2, 3, 4)}},
	{ir.OpBroadcast, at().With("dims", []int{1}).With("shape", []int{2, 3}), []argSpec{f(3)}},
	{ir.OpSlice, at().With("start", []int{1, 0}).With("limit", []int{3, 2}), []argSpec{f(3, 4)}},
	{ir.OpConcat, at().With("axis", 1), []argSpec{f(3, 4), f(3, 1)}},
	{ir.OpGather, nil, []argSpec{f(3, 4), i(2, 5)}},
	{ir.OpScatterAdd, at().With("rows", 3), []argSpec{i(2, 5), f(2, 5, 4)}},
	{ir.OpSparseCrossEntropy, nil, []argSpec{f(2, 5, 3), i(2, 5)}},
	{ir.OpConv2D, at().With("stride", []int{2, 1}).With("pad", []int{1, 0}), []argSpec{f(2, 3, 6, 5), f(4, 3, 3, 2)}},
	{ir.OpConv2DInputGrad, at().With("stride", []int{2, 1}).With("pad", []int{1, 0}).With("shape", []int{2, 3, 6, 5}), []argSpec{f(2, 4, 3, 4), f(4, 3, 3, 2)}},
	{ir.OpConv2DFilterGrad, at().With("stride", []int{2, 1}).With("pad", []int{1, 0}).With("kernel", []int{3, 2}), []argSpec{f(2, 3, 6, 5), f(2, 4, 3, 4)}},
	{ir.OpMaxPool, at().With("window", []int{2, 2}).With("stride", []int{2, 2}), []argSpec{f(2, 3, 4, 4)}},
	{ir.OpMaxPoolGrad, at().With("window", []int{2, 2}).With("stride", []int{2, 2}), []argSpec{f(2, 3, 4, 4), f(2, 3, 2, 2)}},
	{ir.OpAvgPool, at().With("window", []int{3, 3}).With("stride", []int{1, 1}).With("pad", []int{1, 1}), []argSpec{f(2, 3, 4, 4)}},
	{ir.OpAvgPoolGrad, at().With("window", []int{3, 3}).With("stride", []int{1, 1}).With("pad", []int{1, 1}).With("shape", []int{2, 3, 4, 4}), []argSpec{f(2, 3, 4, 4)}},
}

// sweepArgs draws each case's operands once in float64, already rounded to float32 (and to
// f16 when lowp), so every precision starts from the same numbers.
func sweepArgs(c sweepCase, seed uint64, lowp bool) [][]float64 {
	r := rngFor(seed)
	out := make([][]float64, len(c.args))
	for k, a := range c.args {
		n := int(ir.Shape(a.shape).NumElements())
		out[k] = make([]float64, n)
		for j := range out[k] {
			var v float64
			switch a.kind {
			case 'f':
				v = r.NormFloat64()
			case 'p':
				v = 0.5 + 2*r.Float64()
			case 'i':
				v = float64(r.IntN(3))
			case 'b':
				v = float64(r.IntN(2))
			}
			v = float64(float32(v))
			if lowp {
				v = float64(roundF16(float32(v)))
			}
			out[k][j] = v
		}
	}
	return out
}

func sweepOperands(c sweepCase, data [][]float64, dt ir.DType) []*Tensor {
	args := make([]*Tensor, len(c.args))
	for k, a := range c.args {
		adt := dt
		switch a.kind {
		case 'i':
			adt = ir.I32
		case 'b':
			adt = ir.Bool
		}
		args[k] = FromF64(adt, a.shape, data[k])
	}
	return args
}

// sweepAttrs retypes constant and iota to dt.
func sweepAttrs(c sweepCase, dt ir.DType) ir.Attrs {
	if t, ok := c.at.Get("type"); ok {
		return c.at.With("type", ir.Type{DType: dt, Shape: t.(ir.Type).Shape})
	}
	return c.at
}

// TestPrecisionSweep runs every op in f64, f32, f16 and bf16 from the same operands: f32
// must agree with f64 to float32 accuracy, f16 and bf16 to their own, and every f16/bf16
// result must be exactly representable in its format (rounded after the op).
func TestPrecisionSweep(t *testing.T) {
	covered := map[ir.Op]bool{}
	for n, c := range sweepCases {
		covered[c.op] = true
		t.Run(c.op.String(), func(t *testing.T) {
			data := sweepArgs(c, uint64(n), false)
			ref := eval(t, c.op, sweepAttrs(c, ir.F64), sweepOperands(c, data, ir.F64)...)
			got := eval(t, c.op, sweepAttrs(c, ir.F32), sweepOperands(c, data, ir.F32)...)
			requireClose(t, ref.Float64s(), got, 1e-5)

			lowData := sweepArgs(c, uint64(n), true)
			ref = eval(t, c.op, sweepAttrs(c, ir.F64), sweepOperands(c, lowData, ir.F64)...)
			for _, dt := range []ir.DType{ir.F16, ir.BF16} {
				if dt == ir.BF16 {
					lowData = sweepArgs(c, uint64(n), false)
					for _, d := range lowData {
						for j := range d {
							d[j] = float64(roundBF16(float32(d[j])))
						}
					}
					ref = eval(t, c.op, sweepAttrs(c, ir.F64), sweepOperands(c, lowData, ir.F64)...)
				}
				got := eval(t, c.op, sweepAttrs(c, dt), sweepOperands(c, lowData, dt)...)
				tol := map[ir.DType]float64{ir.F16: 2e-3, ir.BF16: 1.6e-2}[dt]
				requireClose(t, ref.Float64s(), got, tol)
				if got.F32 != nil {
					for j, v := range got.F32 {
						require.Equal(t, v, roundLow(dt, v), "%s result %d = %g is not a %s value", c.op, j, v, dt)
					}
				}
			}
		})
	}
	for _, op := range ir.AllOps() {
		if op.IsLeaf() {
			continue
		}
		require.True(t, covered[op], "sweepCases lacks %s", op)
	}
}

func roundLow(dt ir.DType, v float32) float32 {
	if dt == ir.F16 {
		return roundF16(v)
	}
	return roundBF16(v)
}
