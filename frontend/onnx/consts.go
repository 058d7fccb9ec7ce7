package onnx

import (
	"fmt"

	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/runtime/kernels"
)

// The IR has no tensor literals: a constant is one value broadcast (constant), or an index
// along an axis (iota). A tensor known at import time that a runtime op needs is rebuilt
// from those when it has one of the forms exporters produce:
//   - uniform: constant;
//   - an arange along one axis (position ids): iota, times a step, plus a start;
//   - a triangular mask over two axes (causal attention), bool or two-valued (0 / -inf):
//     a comparison of two iotas, and a where between the two values.
// Anything else is an error naming it: baking an arbitrary tensor into the model is what
// params are for, and an integer or bool initializer is not trained.

// materialize builds v.c from ops.
func (im *importer) materialize(v *val) (ir.ValueID, error) {
	t := v.c
	base := sanitize(v.onnx)
	if u, ok := uniform(t); ok {
		return im.scalar(base, u, t.Type.DType, t.Type.Shape)
	}
	if ax, start, step, ok := arange(t); ok {
		return im.arangeOps(base, t.Type, ax, start, step)
	}
	if r, c, k, below, hi, lo, ok := triangle(t); ok {
		return im.triangleOps(base, t.Type, r, c, k, below, hi, lo)
	}
	return ir.NoValue, fmt.Errorf("tensor %q (%s) is known at import time but is neither uniform, an arange nor a triangular mask, and the IR holds no tensor literals", v.onnx, t.Type)
}

func uniform(t *kernels.Tensor) (float64, bool) {
	u := t.At(0)
	for i := 1; i < t.Len(); i++ {
		if t.At(i) != u {
			return 0, false
		}
	}
	return u, true
}

// coords returns the multi-index of flat index i.
func coords(s ir.Shape, i int, out []int) {
	for d := len(s) - 1; d >= 0; d-- {
		out[d] = i % s[d]
		i /= s[d]
	}
}

// arange reports whether t[i] = start + step·index[ax] everywhere.
func arange(t *kernels.Tensor) (ax int, start, step float64, ok bool) {
	s := t.Type.Shape
	if t.Type.DType == ir.Bool {
		return 0, 0, 0, false
	}
	idx := make([]int, len(s))
	for ax = range s {
		if s[ax] < 2 {
			continue
		}
		start = t.At(0)
		stride := int(ir.Shape(s[ax+1:]).NumElements())
		step = t.At(stride) - start
		ok = true
		for i := range t.Len() {
			coords(s, i, idx)
			if t.At(i) != start+step*float64(idx[ax]) {
				ok = false
				break
			}
		}
		if ok {
			return ax, start, step, true
		}
	}
	return 0, 0, 0, false
}

func (im *importer) arangeOps(base string, t ir.Type, ax int, start, step float64) (ir.ValueID, error) {
	id, err := im.emit(ir.OpIota, base+".iota", nil, ir.Attrs{}.With("axis", ax).With("type", t))
	if err != nil || (step == 1 && start == 0) {
		return id, err
	}
	if step != 1 {
		k, err := im.scalar(base+".step", step, t.DType, nil)
		if err != nil {
			return ir.NoValue, err
		}
		if id, err = im.emit(ir.OpMul, base+".scaled", []ir.ValueID{id, k}, nil); err != nil {
			return ir.NoValue, err
		}
	}
	if start == 0 {
		return id, nil
	}
	k, err := im.scalar(base+".start", start, t.DType, nil)
	if err != nil {
		return ir.NoValue, err
	}
	return im.emit(ir.OpAdd, base, []ir.ValueID{id, k}, nil)
}

// triangle reports whether t holds hi where index[c] <= index[r]+k (below) or where
// index[c] > index[r]+k (!below), and lo elsewhere, for two axes r < c.
func triangle(t *kernels.Tensor) (r, c, k int, below bool, hi, lo float64, ok bool) {
	s := t.Type.Shape
	vals := distinct(t, 3)
	if len(vals) != 2 {
		return
	}
	if vals[0] < vals[1] { // try the larger value (true) as the triangle first
		vals[0], vals[1] = vals[1], vals[0]
	}
	idx := make([]int, len(s))
	for r = 0; r < len(s); r++ {
		for c = r + 1; c < len(s); c++ {
			if s[r] < 2 || s[c] < 2 {
				continue
			}
			for _, pick := range [][2]float64{{vals[0], vals[1]}, {vals[1], vals[0]}} {
				hi, lo = pick[0], pick[1]
				for _, below = range []bool{true, false} {
					if k, ok = triangleOffset(t, r, c, hi, below, idx); ok {
						return
					}
				}
			}
		}
	}
	return 0, 0, 0, false, 0, 0, false
}

// triangleOffset finds k from the first row of the (r, c) plane that is neither all hi
// nor all lo, then checks every element.
func triangleOffset(t *kernels.Tensor, r, c int, hi float64, below bool, idx []int) (int, bool) {
	s := t.Type.Shape
	k, found := 0, false
	for i := range t.Len() {
		coords(s, i, idx)
		if idx[c] != 0 {
			continue
		}
		count := 0 // the his in this row of the plane
		for j := range s[c] {
			if t.At(i+j*int(ir.Shape(s[c+1:]).NumElements())) == hi {
				count++
			}
		}
		if count == 0 || count == s[c] {
			continue
		}
		if below { // index[c] <= row+k holds for index[c] in [0, row+k]: count = row+k+1
			k = count - idx[r] - 1
		} else { // index[c] > row+k holds for index[c] in (row+k, C): count = C-row-k-1
			k = s[c] - count - idx[r] - 1
		}
		found = true
		break
	}
	if !found {
		return 0, false
	}
	for i := range t.Len() {
		coords(s, i, idx)
		in := idx[c] <= idx[r]+k
		if !below {
			in = !in
		}
		if (t.At(i) == hi) != in {
			return 0, false
		}
	}
	return k, true
}

// distinct returns up to max distinct values of t, in order of appearance.
func distinct(t *kernels.Tensor, max int) []float64 {
	var out []float64
	for i := range t.Len() {
		x := t.At(i)
		seen := false
		for _, y := range out {
			seen = seen || x == y
		}
		if !seen {
			if out = append(out, x); len(out) == max {
				return out
			}
		}
	}
	return out
}

func (im *importer) triangleOps(base string, t ir.Type, r, c, k int, below bool, hi, lo float64) (ir.ValueID, error) {
	it := ir.Type{DType: ir.I64, Shape: t.Shape}
	row, err := im.emit(ir.OpIota, base+".row", nil, ir.Attrs{}.With("axis", r).With("type", it))
	if err != nil {
		return ir.NoValue, err
	}
	col, err := im.emit(ir.OpIota, base+".col", nil, ir.Attrs{}.With("axis", c).With("type", it))
	if err != nil {
		return ir.NoValue, err
	}
	if k != 0 {
		kk, err := im.scalar(base+".offset", float64(k), ir.I64, nil)
		if err != nil {
			return ir.NoValue, err
		}
		if row, err = im.emit(ir.OpAdd, base+".row", []ir.ValueID{row, kk}, nil); err != nil {
			return ir.NoValue, err
		}
	}
	cmp := ir.OpLe
	if !below {
		cmp = ir.OpGt
	}
	name := base
	if t.DType != ir.Bool || hi != 1 {
		name = base + ".mask"
	}
	mask, err := im.emit(cmp, name, []ir.ValueID{col, row}, nil)
	if err != nil || t.DType == ir.Bool && hi == 1 {
		return mask, err
	}
	if t.DType == ir.Bool { // hi is false: the mask is the other triangle
		return im.emit(ir.OpEq, base, []ir.ValueID{mask, must(im.scalar(base+".false", 0, ir.Bool, nil))}, nil)
	}
	a, err := im.scalar(base+".hi", hi, t.DType, nil)
	if err != nil {
		return ir.NoValue, err
	}
	b, err := im.scalar(base+".lo", lo, t.DType, nil)
	if err != nil {
		return ir.NoValue, err
	}
	return im.emit(ir.OpWhere, base, []ir.ValueID{mask, a, b}, nil)
}

// must returns id, for ops whose operands are known good (a scalar constant); it panics on
// an error, which would be an importer bug.
func must(id ir.ValueID, err error) ir.ValueID {
	if err != nil {
		panic("onnx: " + err.Error())
	}
	return id
}
