package kernels

import (
	"errors"
	"math"

	"github.com/autopar/autopar/ir"
)

// Elementwise kernels: arithmetic and compares under numpy broadcasting, where, the unary
// float maps, cast and dropout. Each switches on the op once per row, never per element.

type float interface{ float32 | float64 }

type number interface{ float32 | float64 | int64 }

var errDivZero = errors.New("integer division by zero")

func evalBinary(op ir.Op, _ ir.Attrs, out *Tensor, args []*Tensor) error {
	a, b := args[0], args[1]
	w := broadcastWalk(out.Type.Shape, a.Type.Shape, b.Type.Shape)
	switch storageOf(out.Type.DType) {
	case stF32:
		binary(op, w, out.F32, a.F32, b.F32)
	case stF64:
		binary(op, w, out.F64, a.F64, b.F64)
	default:
		if op == ir.OpDiv {
			return divInts(w, out.Int, a.Int, b.Int)
		}
		binary(op, w, out.Int, a.Int, b.Int)
	}
	return nil
}

func binary[T number](op ir.Op, w *walk, d, a, b []T) {
	n, sa, sb := w.n(), w.inner(1), w.inner(2)
	w.rows(func(off []int) { binRow(op, d[off[0]:off[0]+n], a, off[1], sa, b, off[2], sb) })
}

// binRow computes one row d[j] = a[ia+j·sa] op b[ib+j·sb]. Integer div is divInts.
func binRow[T number](op ir.Op, d, a []T, ia, sa int, b []T, ib, sb int) {
	switch op {
	case ir.OpAdd:
		for j := range d {
			d[j] = a[ia] + b[ib]
			ia, ib = ia+sa, ib+sb
		}
	case ir.OpSub:
		for j := range d {
			d[j] = a[ia] - b[ib]
			ia, ib = ia+sa, ib+sb
		}
	case ir.OpMul:
		for j := range d {
			d[j] = a[ia] * b[ib]
			ia, ib = ia+sa, ib+sb
		}
	case ir.OpDiv:
		for j := range d {
			d[j] = a[ia] / b[ib]
			ia, ib = ia+sa, ib+sb
		}
	case ir.OpMax:
		for j := range d {
			x, y := a[ia], b[ib]
			if y > x || y != y { // NaN wins, as in math.Max
				x = y
			}
			d[j] = x
			ia, ib = ia+sa, ib+sb
		}
	default:
		panic("kernels: binRow of " + op.String())
	}
}

// divInts truncates toward zero, as Go and C do, and reports a zero divisor as an error
// rather than a crash.
func divInts(w *walk, d, a, b []int64) error {
	n, sa, sb := w.n(), w.inner(1), w.inner(2)
	var err error
	w.rows(func(off []int) {
		ia, ib := off[1], off[2]
		for j := range d[off[0] : off[0]+n] {
			if b[ib] == 0 {
				err = errDivZero
				return
			}
			d[off[0]+j] = a[ia] / b[ib]
			ia, ib = ia+sa, ib+sb
		}
	})
	return err
}

func evalCompare(op ir.Op, _ ir.Attrs, out *Tensor, args []*Tensor) error {
	a, b := args[0], args[1]
	w := broadcastWalk(out.Type.Shape, a.Type.Shape, b.Type.Shape)
	switch storageOf(a.Type.DType) {
	case stF32:
		compare(op, w, out.Int, a.F32, b.F32)
	case stF64:
		compare(op, w, out.Int, a.F64, b.F64)
	default:
		compare(op, w, out.Int, a.Int, b.Int)
	}
	return nil
}

func compare[T number](op ir.Op, w *walk, d []int64, a, b []T) {
	n, sa, sb := w.n(), w.inner(1), w.inner(2)
	w.rows(func(off []int) { cmpRow(op, d[off[0]:off[0]+n], a, off[1], sa, b, off[2], sb) })
}

// cmpRow writes one row of a compare as 0/1. Compares with NaN are false except ne.
func cmpRow[T number](op ir.Op, d []int64, a []T, ia, sa int, b []T, ib, sb int) {
	switch op {
	case ir.OpEq:
		for j := range d {
			d[j] = b2i(a[ia] == b[ib])
			ia, ib = ia+sa, ib+sb
		}
	case ir.OpNe:
		for j := range d {
			d[j] = b2i(a[ia] != b[ib])
			ia, ib = ia+sa, ib+sb
		}
	case ir.OpLt:
		for j := range d {
			d[j] = b2i(a[ia] < b[ib])
			ia, ib = ia+sa, ib+sb
		}
	case ir.OpLe:
		for j := range d {
			d[j] = b2i(a[ia] <= b[ib])
			ia, ib = ia+sa, ib+sb
		}
	case ir.OpGt:
		for j := range d {
			d[j] = b2i(a[ia] > b[ib])
			ia, ib = ia+sa, ib+sb
		}
	case ir.OpGe:
		for j := range d {
			d[j] = b2i(a[ia] >= b[ib])
			ia, ib = ia+sa, ib+sb
		}
	default:
		panic("kernels: cmpRow of " + op.String())
	}
}

func evalWhere(_ ir.Op, _ ir.Attrs, out *Tensor, args []*Tensor) error {
	c, a, b := args[0], args[1], args[2]
	w := broadcastWalk(out.Type.Shape, c.Type.Shape, a.Type.Shape, b.Type.Shape)
	switch storageOf(out.Type.DType) {
	case stF32:
		where(w, out.F32, c.Int, a.F32, b.F32)
	case stF64:
		where(w, out.F64, c.Int, a.F64, b.F64)
	default:
		where(w, out.Int, c.Int, a.Int, b.Int)
	}
	return nil
}

func where[T number](w *walk, d []T, c []int64, a, b []T) {
	n, sc, sa, sb := w.n(), w.inner(1), w.inner(2), w.inner(3)
	w.rows(func(off []int) {
		ic, ia, ib := off[1], off[2], off[3]
		for j := range d[off[0] : off[0]+n] {
			if c[ic] != 0 {
				d[off[0]+j] = a[ia]
			} else {
				d[off[0]+j] = b[ib]
			}
			ic, ia, ib = ic+sc, ia+sa, ib+sb
		}
	})
}

func evalUnary(op ir.Op, _ ir.Attrs, out *Tensor, args []*Tensor) error {
	x := args[0]
	switch storageOf(out.Type.DType) {
	case stF32:
		unary(op, out.F32, x.F32)
	case stF64:
		unary(op, out.F64, x.F64)
	default: // only neg takes integers
		for i, v := range x.Int {
			out.Int[i] = -v
		}
	}
	return nil
}

// unary applies a float map. gelu is the exact form x·Φ(x) = x/2·(1 + erf(x/√2)), not the
// tanh approximation; autodiff's gelu rule must match it.
func unary[T float](op ir.Op, d, x []T) {
	switch op {
	case ir.OpNeg:
		for i, v := range x {
			d[i] = -v
		}
	case ir.OpExp:
		for i, v := range x {
			d[i] = T(math.Exp(float64(v)))
		}
	case ir.OpLog:
		for i, v := range x {
			d[i] = T(math.Log(float64(v)))
		}
	case ir.OpTanh:
		for i, v := range x {
			d[i] = T(math.Tanh(float64(v)))
		}
	case ir.OpRelu:
		for i, v := range x {
			d[i] = max(v, 0)
		}
	case ir.OpGelu:
		for i, v := range x {
			d[i] = T(0.5 * float64(v) * (1 + math.Erf(float64(v)/math.Sqrt2)))
		}
	case ir.OpSigmoid:
		for i, v := range x {
			d[i] = T(sigmoid(float64(v)))
		}
	case ir.OpSqrt:
		for i, v := range x {
			d[i] = T(math.Sqrt(float64(v)))
		}
	case ir.OpRsqrt:
		for i, v := range x {
			d[i] = T(1 / math.Sqrt(float64(v)))
		}
	default:
		panic("kernels: unary of " + op.String())
	}
}

// sigmoid avoids exp overflow on either side.
func sigmoid(x float64) float64 {
	if x >= 0 {
		return 1 / (1 + math.Exp(-x))
	}
	e := math.Exp(x)
	return e / (1 + e)
}

// evalCast converts between any two dtypes: floats convert by value (and Eval rounds to
// f16/bf16 after), floats to integers truncate toward zero (NaN and out-of-range values
// give whatever Go's conversion gives), anything to bool is x != 0, bool to numbers is 0/1.
func evalCast(_ ir.Op, _ ir.Attrs, out *Tensor, args []*Tensor) error {
	x := args[0]
	toBool := out.Type.DType == ir.Bool
	switch storageOf(out.Type.DType) {
	case stF32:
		switch {
		case x.F32 != nil:
			copy(out.F32, x.F32)
		case x.F64 != nil:
			convert(out.F32, x.F64)
		default:
			convert(out.F32, x.Int)
		}
	case stF64:
		switch {
		case x.F32 != nil:
			convert(out.F64, x.F32)
		case x.F64 != nil:
			copy(out.F64, x.F64)
		default:
			convert(out.F64, x.Int)
		}
	default:
		switch {
		case x.F32 != nil:
			castToInt(out.Int, x.F32, toBool)
		case x.F64 != nil:
			castToInt(out.Int, x.F64, toBool)
		default:
			copy(out.Int, x.Int) // Eval wraps to i32 or bool after
		}
	}
	return nil
}

func convert[D, S number](d []D, s []S) {
	for i, v := range s {
		d[i] = D(v)
	}
}

func castToInt[S float](d []int64, s []S, toBool bool) {
	if toBool {
		for i, v := range s {
			d[i] = b2i(v != 0)
		}
		return
	}
	for i, v := range s {
		d[i] = int64(v)
	}
}
