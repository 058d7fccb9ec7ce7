package kernels

import (
	"errors"
	"math"

	"github.com/autopar/autopar/ir"
)

// Elementwise kernels: arithmetic and compares under numpy broadcasting, where, the unary
// float maps, cast and dropout. Each op is registered once, below, with its own row
// functions (generic over the storage type, so each instantiation is a plain loop): a new
// elementwise op is one row function and one line here.

type float interface{ float32 | float64 }

type number interface{ float32 | float64 | int64 }

var errDivZero = errors.New("integer division by zero")

var _ = register(map[ir.Op]kernel{
	ir.OpAdd:     binaryKernel(addRow[float32], addRow[float64], intRows(addRow[int64])),
	ir.OpSub:     binaryKernel(subRow[float32], subRow[float64], intRows(subRow[int64])),
	ir.OpMul:     binaryKernel(mulRow[float32], mulRow[float64], intRows(mulRow[int64])),
	ir.OpDiv:     binaryKernel(divRow[float32], divRow[float64], divInts),
	ir.OpMax:     binaryKernel(maxRow[float32], maxRow[float64], intRows(maxRow[int64])),
	ir.OpEq:      compareKernel(eqRow[float32], eqRow[float64], eqRow[int64]),
	ir.OpNe:      compareKernel(neRow[float32], neRow[float64], neRow[int64]),
	ir.OpLt:      compareKernel(ltRow[float32], ltRow[float64], ltRow[int64]),
	ir.OpLe:      compareKernel(leRow[float32], leRow[float64], leRow[int64]),
	ir.OpGt:      compareKernel(gtRow[float32], gtRow[float64], gtRow[int64]),
	ir.OpGe:      compareKernel(geRow[float32], geRow[float64], geRow[int64]),
	ir.OpWhere:   evalWhere,
	ir.OpNeg:     unaryKernel(negRow[float32], negRow[float64], negRow[int64]),
	ir.OpExp:     unaryKernel(expRow[float32], expRow[float64], nil),
	ir.OpLog:     unaryKernel(logRow[float32], logRow[float64], nil),
	ir.OpTanh:    unaryKernel(tanhRow[float32], tanhRow[float64], nil),
	ir.OpRelu:    unaryKernel(reluRow[float32], reluRow[float64], nil),
	ir.OpGelu:    unaryKernel(geluRow[float32], geluRow[float64], nil),
	ir.OpSigmoid: unaryKernel(sigmoidRow[float32], sigmoidRow[float64], nil),
	ir.OpSqrt:    unaryKernel(sqrtRow[float32], sqrtRow[float64], nil),
	ir.OpRsqrt:   unaryKernel(rsqrtRow[float32], rsqrtRow[float64], nil),
	ir.OpCast:    evalCast,
	ir.OpDropout: evalDropout,
})

// binRowFn computes one row d[j] = a[ia+j·sa] op b[ib+j·sb].
type binRowFn[T number] func(d, a []T, ia, sa int, b []T, ib, sb int)

// binaryKernel is the kernel of a binary arithmetic op under broadcasting, from its rows
// per storage type; ints may fail (integer division by zero).
func binaryKernel(f32 binRowFn[float32], f64 binRowFn[float64], ints func(w *walk, d, a, b []int64) error) kernel {
	return func(_ ir.Op, _ ir.Attrs, out *Tensor, args []*Tensor) error {
		a, b := args[0], args[1]
		w := broadcastWalk(out.Type.Shape, a.Type.Shape, b.Type.Shape)
		switch storageOf(out.Type.DType) {
		case stF32:
			binary(w, out.F32, a.F32, b.F32, f32)
		case stF64:
			binary(w, out.F64, a.F64, b.F64, f64)
		default:
			return ints(w, out.Int, a.Int, b.Int)
		}
		return nil
	}
}

func binary[T number](w *walk, d, a, b []T, row binRowFn[T]) {
	n, sa, sb := w.n(), w.inner(1), w.inner(2)
	w.rows(func(off []int) { row(d[off[0]:off[0]+n], a, off[1], sa, b, off[2], sb) })
}

// intRows is the integer part of a binary kernel whose rows cannot fail.
func intRows(row binRowFn[int64]) func(w *walk, d, a, b []int64) error {
	return func(w *walk, d, a, b []int64) error {
		binary(w, d, a, b, row)
		return nil
	}
}

func addRow[T number](d, a []T, ia, sa int, b []T, ib, sb int) {
	for j := range d {
		d[j] = a[ia] + b[ib]
		ia, ib = ia+sa, ib+sb
	}
}

func subRow[T number](d, a []T, ia, sa int, b []T, ib, sb int) {
	for j := range d {
		d[j] = a[ia] - b[ib]
		ia, ib = ia+sa, ib+sb
	}
}

func mulRow[T number](d, a []T, ia, sa int, b []T, ib, sb int) {
	for j := range d {
		d[j] = a[ia] * b[ib]
		ia, ib = ia+sa, ib+sb
	}
}

// divRow divides floats; integer division is divInts.
func divRow[T float](d, a []T, ia, sa int, b []T, ib, sb int) {
	for j := range d {
		d[j] = a[ia] / b[ib]
		ia, ib = ia+sa, ib+sb
	}
}

func maxRow[T number](d, a []T, ia, sa int, b []T, ib, sb int) {
	for j := range d {
		x, y := a[ia], b[ib]
		if y > x || y != y { // NaN wins, as in math.Max
			x = y
		}
		d[j] = x
		ia, ib = ia+sa, ib+sb
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

// cmpRowFn writes one row of a compare as 0/1.
type cmpRowFn[T number] func(d []int64, a []T, ia, sa int, b []T, ib, sb int)

// compareKernel is the kernel of a compare under broadcasting, from its rows per operand
// storage type. Compares with NaN are false except ne.
func compareKernel(f32 cmpRowFn[float32], f64 cmpRowFn[float64], ints cmpRowFn[int64]) kernel {
	return func(_ ir.Op, _ ir.Attrs, out *Tensor, args []*Tensor) error {
		a, b := args[0], args[1]
		w := broadcastWalk(out.Type.Shape, a.Type.Shape, b.Type.Shape)
		switch storageOf(a.Type.DType) {
		case stF32:
			compare(w, out.Int, a.F32, b.F32, f32)
		case stF64:
			compare(w, out.Int, a.F64, b.F64, f64)
		default:
			compare(w, out.Int, a.Int, b.Int, ints)
		}
		return nil
	}
}

func compare[T number](w *walk, d []int64, a, b []T, row cmpRowFn[T]) {
	n, sa, sb := w.n(), w.inner(1), w.inner(2)
	w.rows(func(off []int) { row(d[off[0]:off[0]+n], a, off[1], sa, b, off[2], sb) })
}

func eqRow[T number](d []int64, a []T, ia, sa int, b []T, ib, sb int) {
	for j := range d {
		d[j] = b2i(a[ia] == b[ib])
		ia, ib = ia+sa, ib+sb
	}
}

func neRow[T number](d []int64, a []T, ia, sa int, b []T, ib, sb int) {
	for j := range d {
		d[j] = b2i(a[ia] != b[ib])
		ia, ib = ia+sa, ib+sb
	}
}

func ltRow[T number](d []int64, a []T, ia, sa int, b []T, ib, sb int) {
	for j := range d {
		d[j] = b2i(a[ia] < b[ib])
		ia, ib = ia+sa, ib+sb
	}
}

func leRow[T number](d []int64, a []T, ia, sa int, b []T, ib, sb int) {
	for j := range d {
		d[j] = b2i(a[ia] <= b[ib])
		ia, ib = ia+sa, ib+sb
	}
}

func gtRow[T number](d []int64, a []T, ia, sa int, b []T, ib, sb int) {
	for j := range d {
		d[j] = b2i(a[ia] > b[ib])
		ia, ib = ia+sa, ib+sb
	}
}

func geRow[T number](d []int64, a []T, ia, sa int, b []T, ib, sb int) {
	for j := range d {
		d[j] = b2i(a[ia] >= b[ib])
		ia, ib = ia+sa, ib+sb
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

// unaryKernel is the kernel of a unary map over the whole tensor, from its rows per
// storage type; ints is nil for the float-only maps (the shape rule refuses integers).
func unaryKernel(f32 func(d, x []float32), f64 func(d, x []float64), ints func(d, x []int64)) kernel {
	return func(_ ir.Op, _ ir.Attrs, out *Tensor, args []*Tensor) error {
		x := args[0]
		switch storageOf(out.Type.DType) {
		case stF32:
			f32(out.F32, x.F32)
		case stF64:
			f64(out.F64, x.F64)
		default:
			ints(out.Int, x.Int)
		}
		return nil
	}
}

// The float maps compute in float64 and convert, as f16 and bf16 round after.

func expRow[T float](d, x []T) {
	for i, v := range x {
		d[i] = T(math.Exp(float64(v)))
	}
}

func logRow[T float](d, x []T) {
	for i, v := range x {
		d[i] = T(math.Log(float64(v)))
	}
}

func tanhRow[T float](d, x []T) {
	for i, v := range x {
		d[i] = T(math.Tanh(float64(v)))
	}
}

func geluRow[T float](d, x []T) {
	for i, v := range x {
		d[i] = T(gelu(float64(v)))
	}
}

func sigmoidRow[T float](d, x []T) {
	for i, v := range x {
		d[i] = T(sigmoid(float64(v)))
	}
}

func sqrtRow[T float](d, x []T) {
	for i, v := range x {
		d[i] = T(math.Sqrt(float64(v)))
	}
}

func rsqrtRow[T float](d, x []T) {
	for i, v := range x {
		d[i] = T(1 / math.Sqrt(float64(v)))
	}
}

func negRow[T number](d, x []T) {
	for i, v := range x {
		d[i] = -v
	}
}

func reluRow[T float](d, x []T) {
	for i, v := range x {
		d[i] = max(v, 0)
	}
}

// gelu is the exact form x·Φ(x) = x/2·(1 + erf(x/√2)), not the tanh approximation;
// autodiff's gelu rule must match it.
func gelu(x float64) float64 { return 0.5 * x * (1 + math.Erf(x/math.Sqrt2)) }

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
