package kernels

import (
	"math"
	"slices"

	"github.com/autopar/autopar/ir"
)

var _ = register(map[ir.Op]kernel{
	ir.OpReduceSum:  evalReduce,
	ir.OpReduceMax:  evalReduce,
	ir.OpReduceMean: evalReduce,
	ir.OpSoftmax:    evalAlongAxis,
	ir.OpLogSoftmax: evalAlongAxis,
	ir.OpCumsum:     evalAlongAxis,
	ir.OpLayerNorm:  evalNorm,
	ir.OpBatchNorm:  evalNorm,
})

// Reductions and the row-wise ops (softmax, log_softmax, cumsum, layer_norm, batch_norm).

func evalReduce(op ir.Op, at ir.Attrs, out *Tensor, args []*Tensor) error {
	x := args[0]
	axes := at.Ints("axes")
	switch {
	case out.F32 != nil:
		reduceAxes(op, out.F32, x.F32, x.Type.Shape, axes)
	case out.F64 != nil:
		reduceAxes(op, out.F64, x.F64, x.Type.Shape, axes)
	default:
		reduceAxes(op, out.Int, x.Int, x.Type.Shape, axes)
	}
	return nil
}

// reduceAxes reduces x of shape s over the sorted axes into d (the kept dims in order) with
// reduce_sum, reduce_max or reduce_mean. Runs of kept and reduced dims are merged first;
// the two common layouts, [kept, reduced] (rows) and [reduced, kept] (columns), reduce in
// place, and any other is transposed to [kept, reduced] first.
func reduceAxes[T number](op ir.Op, d, x []T, s []int, axes []int) {
	red := make([]bool, len(s))
	for _, a := range axes {
		red[a] = true
	}
	var groups []int // merged sizes, alternating kind, starting with kind red[0]
	var kinds []bool
	for i, n := range s {
		if n == 1 {
			continue
		}
		if len(kinds) > 0 && kinds[len(kinds)-1] == red[i] {
			groups[len(groups)-1] *= n
			continue
		}
		groups, kinds = append(groups, n), append(kinds, red[i])
	}
	switch {
	case len(groups) == 0 || !slices.Contains(kinds, true): // nothing to reduce
		copy(d, x)
	case len(groups) == 1:
		d[0] = reduceRow(op, x, 1, len(x))
	case len(groups) == 2 && !kinds[0]:
		n := groups[1]
		for i := range d {
			d[i] = reduceRow(op, x[i*n:], 1, n)
		}
	case len(groups) == 2:
		reduceCols(op, d, x, groups[0], groups[1])
	default:
		var keep, drop []int
		for i := range s {
			if red[i] {
				drop = append(drop, i)
			} else {
				keep = append(keep, i)
			}
		}
		t := make([]T, len(x))
		permute(t, x, s, append(keep, drop...))
		n := len(x) / max(len(d), 1)
		for i := range d {
			d[i] = reduceRow(op, t[i*n:], 1, n)
		}
	}
}

// reduceRow reduces n elements of x starting at 0 with the given stride.
func reduceRow[T number](op ir.Op, x []T, stride, n int) T {
	switch op {
	case ir.OpReduceMax:
		m := x[0]
		for i := stride; i < n*stride; i += stride {
			if v := x[i]; v > m || v != v {
				m = v
			}
		}
		return m
	default:
		var sum T
		for i := 0; i < n*stride; i += stride {
			sum += x[i]
		}
		if op == ir.OpReduceMean {
			sum /= T(n)
		}
		return sum
	}
}

// reduceCols reduces x, viewed as [r, k], over its rows into d [k], one row at a time so
// every pass reads memory in order.
func reduceCols[T number](op ir.Op, d, x []T, r, k int) {
	copy(d, x[:k])
	for i := 1; i < r; i++ {
		row := x[i*k : (i+1)*k]
		if op == ir.OpReduceMax {
			for j, v := range row {
				if v > d[j] || v != v {
					d[j] = v
				}
			}
			continue
		}
		for j, v := range row {
			d[j] += v
		}
	}
	if op == ir.OpReduceMean {
		for j := range d {
			d[j] /= T(r)
		}
	}
}

// axisView splits a shape around one axis into [outer, n, inner]: element (o, j, i) sits
// at o·n·inner + j·inner + i.
func axisView(s ir.Shape, ax int) (outer, n, inner int) {
	return int(s[:ax].NumElements()), s[ax], int(s[ax+1:].NumElements())
}

func evalAlongAxis(op ir.Op, at ir.Attrs, out *Tensor, args []*Tensor) error {
	outer, n, inner := axisView(args[0].Type.Shape, at.Int("axis"))
	if out.F32 != nil {
		alongAxis(op, out.F32, args[0].F32, outer, n, inner)
	} else {
		alongAxis(op, out.F64, args[0].F64, outer, n, inner)
	}
	return nil
}

// alongAxis runs softmax, log_softmax or cumsum over each line of n elements (stride
// inner). softmax and log_softmax subtract the line's max first, so large logits do not
// overflow; sums accumulate in float64.
func alongAxis[T float](op ir.Op, d, x []T, outer, n, inner int) {
	for o := range outer {
		for i := range inner {
			base := o*n*inner + i
			switch op {
			case ir.OpCumsum:
				var s float64
				for j := base; j < base+n*inner; j += inner {
					s += float64(x[j])
					d[j] = T(s)
				}
			default:
				softmaxLine(op == ir.OpLogSoftmax, d, x, base, n, inner)
			}
		}
	}
}

func softmaxLine[T float](logOut bool, d, x []T, base, n, inner int) {
	end := base + n*inner
	m := math.Inf(-1)
	for j := base; j < end; j += inner {
		m = max(m, float64(x[j]))
	}
	if logOut {
		var s float64
		for j := base; j < end; j += inner {
			s += math.Exp(float64(x[j]) - m)
		}
		lse := m + math.Log(s)
		for j := base; j < end; j += inner {
			d[j] = T(float64(x[j]) - lse)
		}
		return
	}
	var s float64 // one exp per element: d holds the exps until they are scaled
	for j := base; j < end; j += inner {
		e := math.Exp(float64(x[j]) - m)
		d[j] = T(e)
		s += e
	}
	inv := 1 / s
	for j := base; j < end; j += inner {
		d[j] = T(float64(d[j]) * inv)
	}
}

// evalNorm is layer_norm (normalize each last-dim row, gamma and beta per column) and
// batch_norm in training mode (normalize each channel, dim 1, over the batch and spatial
// dims with the batch's statistics, or each group's: ir.BatchNormGroup). Both use the biased variance and
// y = (x - mean) / sqrt(var + eps) · gamma + beta.
func evalNorm(op ir.Op, at ir.Attrs, out *Tensor, args []*Tensor) error {
	s := args[0].Type.Shape
	outer, c, inner := axisView(s, len(s)-1)
	if op == ir.OpBatchNorm {
		outer, c, inner = axisView(s, 1)
	}
	eps := at.Float("eps")
	// A batch_norm with a group takes its statistics over each block of group rows of dim 0
	// on its own (ir.BatchNormGroup): the blocks are normalized one after the other.
	rows := outer
	if op == ir.OpBatchNorm {
		if k := ir.BatchNormGroup(s, at); k > 0 {
			rows = k
		}
	}
	n := rows * c * inner
	for b := 0; b < outer; b += rows {
		lo, hi := b*c*inner, b*c*inner+n
		if out.F32 != nil {
			norm(op == ir.OpBatchNorm, out.F32[lo:hi], args[0].F32[lo:hi], args[1].F32, args[2].F32, rows, c, inner, eps)
		} else {
			norm(op == ir.OpBatchNorm, out.F64[lo:hi], args[0].F64[lo:hi], args[1].F64, args[2].F64, rows, c, inner, eps)
		}
	}
	return nil
}

// norm normalizes x viewed as [outer, c, inner]: per (outer, inner) line over c when
// perChannel is false (layer norm: inner is 1), per channel over (outer, inner) when true.
func norm[T float](perChannel bool, d, x, gamma, beta []T, outer, c, inner int, eps float64) {
	if !perChannel {
		for o := range outer {
			row, dr := x[o*c:(o+1)*c], d[o*c:(o+1)*c]
			mean, inv := stats(row, 1, 1, len(row), eps)
			for j, v := range row {
				dr[j] = T((float64(v)-mean)*inv*float64(gamma[j]) + float64(beta[j]))
			}
		}
		return
	}
	for ch := range c {
		mean, inv := stats(x[ch*inner:], outer, c*inner, inner, eps)
		g, b := float64(gamma[ch]), float64(beta[ch])
		for o := range outer {
			base := o*c*inner + ch*inner
			for j := base; j < base+inner; j++ {
				d[j] = T((float64(x[j])-mean)*inv*g + b)
			}
		}
	}
}

// stats returns the mean and 1/sqrt(var + eps) of the blocks x[b·stride : b·stride+n] for
// b < blocks, in two passes for accuracy.
func stats[T float](x []T, blocks, stride, n int, eps float64) (mean, inv float64) {
	var s float64
	for b := range blocks {
		for _, v := range x[b*stride : b*stride+n] {
			s += float64(v)
		}
	}
	cnt := float64(blocks * n)
	mean = s / cnt
	var v2 float64
	for b := range blocks {
		for _, v := range x[b*stride : b*stride+n] {
			dv := float64(v) - mean
			v2 += dv * dv
		}
	}
	return mean, 1 / math.Sqrt(v2/cnt+eps)
}
