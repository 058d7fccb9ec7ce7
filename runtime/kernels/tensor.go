package kernels

import (
	"fmt"
	"math"
	"slices"

	"github.com/autopar/autopar/ir"
)

// Tensor is a dense row-major tensor. Exactly one of F32, F64 and Int is non-nil, chosen by
// Type.DType (see the package comment).
type Tensor struct {
	Type ir.Type
	F32  []float32
	F64  []float64
	Int  []int64
}

// storage is the slice a dtype lives in.
type storage uint8

const (
	stF32 storage = iota + 1
	stF64
	stInt
)

func storageOf(dt ir.DType) storage {
	switch dt {
	case ir.F32, ir.F16, ir.BF16:
		return stF32
	case ir.F64:
		return stF64
	case ir.I32, ir.I64, ir.Bool:
		return stInt
	}
	return 0
}

// New returns a zero tensor of type t. It panics on an invalid dtype.
func New(t ir.Type) *Tensor {
	n := int(t.Shape.NumElements())
	x := &Tensor{Type: ir.Type{DType: t.DType, Shape: t.Shape.Clone()}}
	switch storageOf(t.DType) {
	case stF32:
		x.F32 = make([]float32, n)
	case stF64:
		x.F64 = make([]float64, n)
	case stInt:
		x.Int = make([]int64, n)
	default:
		panic(fmt.Sprintf("kernels: New of invalid dtype %s", t.DType))
	}
	return x
}

// FromF64 makes a tensor of dtype dt from float64 data, converting each element as Set
// does (rounding to f16/bf16, truncating to integers, nonzero to true). It panics if
// len(data) is not the number of elements of shape.
func FromF64(dt ir.DType, shape ir.Shape, data []float64) *Tensor {
	t := New(ir.Type{DType: dt, Shape: shape})
	if len(data) != t.Len() {
		panic(fmt.Sprintf("kernels: FromF64 got %d values for shape %s", len(data), shape))
	}
	for i, v := range data {
		t.Set(i, v)
	}
	return t
}

// Len is the number of elements.
func (t *Tensor) Len() int {
	switch {
	case t.F32 != nil:
		return len(t.F32)
	case t.F64 != nil:
		return len(t.F64)
	}
	return len(t.Int)
}

// At returns element i (flat index) as a float64, whatever the dtype.
func (t *Tensor) At(i int) float64 {
	switch {
	case t.F32 != nil:
		return float64(t.F32[i])
	case t.F64 != nil:
		return t.F64[i]
	}
	return float64(t.Int[i])
}

// Set stores v at flat index i, converted to the tensor's dtype: rounded for f16 and bf16,
// truncated toward zero and wrapped for integers, v != 0 for bool.
func (t *Tensor) Set(i int, v float64) {
	switch t.Type.DType {
	case ir.F32:
		t.F32[i] = float32(v)
	case ir.F16:
		t.F32[i] = roundF16(float32(v))
	case ir.BF16:
		t.F32[i] = roundBF16(float32(v))
	case ir.F64:
		t.F64[i] = v
	case ir.I32:
		t.Int[i] = int64(int32(int64(v)))
	case ir.I64:
		t.Int[i] = int64(v)
	case ir.Bool:
		t.Int[i] = b2i(v != 0)
	}
}

// Clone returns a deep copy.
func (t *Tensor) Clone() *Tensor {
	return &Tensor{Type: ir.Type{DType: t.Type.DType, Shape: t.Type.Shape.Clone()},
		F32: slices.Clone(t.F32), F64: slices.Clone(t.F64), Int: slices.Clone(t.Int)}
}

// Float64s returns a copy of the elements as float64.
func (t *Tensor) Float64s() []float64 {
	out := make([]float64, t.Len())
	for i := range out {
		out[i] = t.At(i)
	}
	return out
}

// String prints the type and, for small tensors, the values.
func (t *Tensor) String() string {
	if t.Len() > 16 {
		return fmt.Sprintf("%s{%d values}", t.Type, t.Len())
	}
	return fmt.Sprintf("%s%v", t.Type, t.Float64s())
}

// MaxAbsDiff compares two tensors element by element: abs is the largest |a-b| and rel the
// largest |a-b| / max(|a|, |b|) (an element where both are zero counts 0). NaN in one place
// and not the other, or different lengths, give +Inf for both, so that any tolerance fails.
func MaxAbsDiff(a, b *Tensor) (abs, rel float64) {
	if a.Len() != b.Len() {
		return math.Inf(1), math.Inf(1)
	}
	for i := range a.Len() {
		x, y := a.At(i), b.At(i)
		if math.IsNaN(x) || math.IsNaN(y) {
			if math.IsNaN(x) != math.IsNaN(y) {
				return math.Inf(1), math.Inf(1)
			}
			continue
		}
		if x == y { // equal infinities
			continue
		}
		d := math.Abs(x - y)
		abs = max(abs, d)
		rel = max(rel, d/max(math.Abs(x), math.Abs(y)))
	}
	return abs, rel
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// roundF16 rounds f to the nearest IEEE half-precision value (ties to even), overflowing to
// infinity and flushing through the subnormal range as the format does.
func roundF16(f float32) float32 {
	a := math.Abs(float64(f))
	switch {
	case math.IsNaN(a) || math.IsInf(a, 0) || a == 0:
		return f
	case a >= 65520: // halfway between the largest half (65504) and 65536 rounds up
		return float32(math.Copysign(math.Inf(1), float64(f)))
	}
	var q float64 // the spacing of halves around a
	if a < 0x1p-14 {
		q = 0x1p-24
	} else {
		_, e := math.Frexp(a) // a = m·2^e, m in [0.5, 1)
		q = math.Ldexp(1, e-11)
	}
	return float32(math.Copysign(math.RoundToEven(a/q)*q, float64(f)))
}

// roundBF16 rounds f to the nearest bfloat16 value (ties to even): the top 16 bits of a
// float32.
func roundBF16(f float32) float32 {
	if f != f {
		return f
	}
	b := math.Float32bits(f)
	b += 0x7FFF + (b>>16)&1
	return math.Float32frombits(b & 0xFFFF0000)
}

// roundTo rounds float32 storage in place to dt's precision; a no-op for f32.
func roundTo(dt ir.DType, xs []float32) {
	switch dt {
	case ir.F16:
		for i, v := range xs {
			xs[i] = roundF16(v)
		}
	case ir.BF16:
		for i, v := range xs {
			xs[i] = roundBF16(v)
		}
	}
}

// wrapTo wraps integer storage in place to dt's range: i32 wraps, bool becomes 0/1.
func wrapTo(dt ir.DType, xs []int64) {
	switch dt {
	case ir.I32:
		for i, v := range xs {
			xs[i] = int64(int32(v))
		}
	case ir.Bool:
		for i, v := range xs {
			xs[i] = b2i(v != 0)
		}
	}
}

// Check reports whether t holds exactly the storage its type promises: the one slice its
// dtype lives in, with one element per element of the shape.
func (t *Tensor) Check() error {
	st := storageOf(t.Type.DType)
	n := int(t.Type.Shape.NumElements())
	ok := false
	switch st {
	case stF32:
		ok = t.F32 != nil && len(t.F32) == n && t.F64 == nil && t.Int == nil
	case stF64:
		ok = t.F64 != nil && len(t.F64) == n && t.F32 == nil && t.Int == nil
	case stInt:
		ok = t.Int != nil && len(t.Int) == n && t.F32 == nil && t.F64 == nil
	default:
		return fmt.Errorf("tensor has invalid dtype %s", t.Type.DType)
	}
	if !ok {
		return fmt.Errorf("tensor of type %s does not hold %d elements in its %s storage (has f32 %d, f64 %d, int %d)",
			t.Type, n, t.Type.DType, len(t.F32), len(t.F64), len(t.Int))
	}
	return nil
}
