package kernels

import (
	"slices"

	"github.com/autopar/autopar/ir"
)

// walk visits the elements of an output and the matching elements of its operands row by
// row: the innermost dim is a plain strided loop that the kernels write without calls, and
// the outer dims advance an odometer of offsets once per row. Strides are computed once;
// adjacent dims that are contiguous in every tensor are merged first, so a same-shape
// elementwise op is one row over all the elements.
type walk struct {
	shape   []int   // the iteration space, after coalescing; never empty
	strides [][]int // strides[k][d]: step of tensor k (k = 0 is the output) along dim d
	base    []int   // starting offset of each tensor
}

// contiguous returns row-major strides of s.
func contiguous(s ir.Shape) []int {
	st := make([]int, len(s))
	n := 1
	for i := len(s) - 1; i >= 0; i-- {
		st[i] = n
		n *= s[i]
	}
	return st
}

// broadcastWalk walks a contiguous output of shape out with operands of shapes ins aligned
// on the right under numpy broadcasting: a size-1 operand dim the output stretches gets
// stride 0. The shapes must already have passed the shape rule.
func broadcastWalk(out ir.Shape, ins ...ir.Shape) *walk {
	r := len(out)
	w := &walk{shape: slices.Clone(out), strides: make([][]int, len(ins)+1), base: make([]int, len(ins)+1)}
	w.strides[0] = contiguous(out)
	for k, s := range ins {
		st, cs, off := make([]int, r), contiguous(s), r-len(s)
		for i, d := range s {
			if d == out[off+i] {
				st[off+i] = cs[i]
			}
		}
		w.strides[k+1] = st
	}
	w.coalesce()
	return w
}

// stridedWalk walks a contiguous output of shape out reading one operand with the given
// per-output-dim strides from offset base.
func stridedWalk(out ir.Shape, strides []int, base int) *walk {
	w := &walk{shape: slices.Clone(out), strides: [][]int{contiguous(out), slices.Clone(strides)}, base: []int{0, base}}
	w.coalesce()
	return w
}

// coalesce drops size-1 dims and merges dim i into i+1 where every tensor steps through
// them as one dim.
func (w *walk) coalesce() {
	shape := w.shape[:0]
	keep := make([]int, 0, len(w.shape))
	for i, n := range w.shape {
		if n != 1 {
			keep = append(keep, i)
		}
	}
	strides := make([][]int, len(w.strides))
	for k := range strides {
		for _, i := range keep {
			strides[k] = append(strides[k], w.strides[k][i])
		}
	}
	for _, i := range keep {
		shape = append(shape, w.shape[i])
	}
	for i := len(shape) - 2; i >= 0; i-- {
		if !w.mergeable(strides, shape, i) {
			continue
		}
		shape[i] *= shape[i+1]
		shape = slices.Delete(shape, i+1, i+2)
		for k := range strides {
			strides[k][i] = strides[k][i+1]
			strides[k] = slices.Delete(strides[k], i+1, i+2)
		}
	}
	if len(shape) == 0 {
		shape = append(shape, 1)
		for k := range strides {
			strides[k] = []int{0}
		}
	}
	w.shape, w.strides = shape, strides
}

func (w *walk) mergeable(strides [][]int, shape []int, i int) bool {
	for k := range strides {
		if strides[k][i] != strides[k][i+1]*shape[i+1] {
			return false
		}
	}
	return true
}

// n is the length of a row and inner(k) the stride of tensor k along it.
func (w *walk) n() int          { return w.shape[len(w.shape)-1] }
func (w *walk) inner(k int) int { return w.strides[k][len(w.shape)-1] }

// rows calls fn once per row with the offset of the row's first element in each tensor.
// fn must not keep off.
func (w *walk) rows(fn func(off []int)) {
	r := len(w.shape)
	off := slices.Clone(w.base)
	idx := make([]int, r)
	for {
		fn(off)
		d := r - 2
		for ; d >= 0; d-- {
			idx[d]++
			for k := range off {
				off[k] += w.strides[k][d]
			}
			if idx[d] < w.shape[d] {
				break
			}
			for k := range off {
				off[k] -= w.strides[k][d] * w.shape[d]
			}
			idx[d] = 0
		}
		if d < 0 {
			return
		}
	}
}
