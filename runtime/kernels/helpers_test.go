package kernels

import (
	"math/rand/v2"
	"testing"

	"github.com/autopar/autopar/ir"
	"github.com/stretchr/testify/require"
)

// typ is shorthand for ir.Type in tables.
func typ(dt ir.DType, dims ...int) ir.Type { return ir.Type{DType: dt, Shape: ir.Shape(dims)} }

// vals builds a tensor of type t from values.
func vals(t ir.Type, v ...float64) *Tensor { return FromF64(t.DType, t.Shape, v) }

// randT fills a tensor of type t with N(0,1) values (floats) or [0, 5) integers.
func randT(r *rand.Rand, t ir.Type) *Tensor {
	x := New(t)
	for i := range x.Len() {
		if t.DType.IsFloat() {
			x.Set(i, r.NormFloat64())
		} else {
			x.Set(i, float64(r.IntN(5)))
		}
	}
	return x
}

// eval runs op inferring the result type with the ir's shape rule, as a graph would.
func eval(t *testing.T, op ir.Op, at ir.Attrs, args ...*Tensor) *Tensor {
	t.Helper()
	out, err := evalInfer(op, at, args...)
	require.NoError(t, err)
	return out
}

func evalInfer(op ir.Op, at ir.Attrs, args ...*Tensor) (*Tensor, error) {
	ia := make([]ir.Arg, len(args))
	for i, a := range args {
		ia[i] = ir.Arg{Name: "x", Type: a.Type}
	}
	rt, _, err := ir.InferType(op, ia, at)
	if err != nil {
		return nil, err
	}
	return Eval(op, at, rt, args)
}

// requireClose checks values elementwise within tol (absolute or relative).
func requireClose(t *testing.T, want []float64, got *Tensor, tol float64) {
	t.Helper()
	require.Equal(t, len(want), got.Len(), "length of %s", got.Type)
	w := FromF64(ir.F64, ir.Shape{len(want)}, want)
	g := FromF64(ir.F64, ir.Shape{got.Len()}, got.Float64s())
	abs, rel := MaxAbsDiff(w, g)
	if abs > tol && rel > tol {
		require.Failf(t, "values differ", "want %v\ngot  %v\n(abs %g rel %g)", want, got.Float64s(), abs, rel)
	}
}

func rngFor(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 17)) }
