package kernels

import (
	"github.com/autopar/autopar/ir"
)

var _ = register(map[ir.Op]kernel{
	ir.OpReshape:   evalReshape,
	ir.OpTranspose: evalTranspose,
	ir.OpBroadcast: evalBroadcast,
	ir.OpSlice:     evalSlice,
	ir.OpConcat:    evalConcat,
})

// Layout kernels: they move elements without arithmetic, each as one strided walk over the
// output.

// evalReshape copies: results never alias operands, so a caller may update either.
func evalReshape(_ ir.Op, _ ir.Attrs, out *Tensor, args []*Tensor) error {
	copyData(out, args[0])
	return nil
}

func copyData(dst, src *Tensor) {
	copy(dst.F32, src.F32)
	copy(dst.F64, src.F64)
	copy(dst.Int, src.Int)
}

func evalTranspose(_ ir.Op, at ir.Attrs, out *Tensor, args []*Tensor) error {
	x := args[0]
	xs := contiguous(x.Type.Shape)
	perm := at.Ints("perm")
	st := make([]int, len(perm))
	for i, p := range perm {
		st[i] = xs[p]
	}
	gatherStrided(out, x, st, 0)
	return nil
}

// evalBroadcast follows XLA: operand dim i lands on result dim dims[i]; result dims that
// no operand dim maps to, and operand dims of size 1, repeat (stride 0).
func evalBroadcast(_ ir.Op, at ir.Attrs, out *Tensor, args []*Tensor) error {
	x := args[0]
	xs := contiguous(x.Type.Shape)
	st := make([]int, out.Type.Shape.Rank())
	for i, d := range at.Ints("dims") {
		if x.Type.Shape[i] == out.Type.Shape[d] {
			st[d] = xs[i]
		}
	}
	gatherStrided(out, x, st, 0)
	return nil
}

func evalSlice(_ ir.Op, at ir.Attrs, out *Tensor, args []*Tensor) error {
	x := args[0]
	xs := contiguous(x.Type.Shape)
	base := 0
	for i, s := range at.Ints("start") {
		base += s * xs[i]
	}
	gatherStrided(out, x, xs, base)
	return nil
}

// gatherStrided fills the contiguous out with x[base + Σ idx[d]·strides[d]].
func gatherStrided(out, x *Tensor, strides []int, base int) {
	w := stridedWalk(out.Type.Shape, strides, base)
	switch {
	case out.F32 != nil:
		stridedCopy(w, out.F32, x.F32)
	case out.F64 != nil:
		stridedCopy(w, out.F64, x.F64)
	default:
		stridedCopy(w, out.Int, x.Int)
	}
}

func stridedCopy[T number](w *walk, d, x []T) {
	n, sx := w.n(), w.inner(1)
	if sx == 1 {
		w.rows(func(off []int) { copy(d[off[0]:off[0]+n], x[off[1]:off[1]+n]) })
		return
	}
	w.rows(func(off []int) {
		j := off[1]
		for i := off[0]; i < off[0]+n; i++ {
			d[i] = x[j]
			j += sx
		}
	})
}

// evalConcat copies, for each index of the dims before the axis, one block from every
// operand in turn.
func evalConcat(_ ir.Op, at ir.Attrs, out *Tensor, args []*Tensor) error {
	ax := at.Int("axis")
	s := out.Type.Shape
	outer := int(s[:ax].NumElements())
	inner := int(s[ax+1:].NumElements())
	blocks := make([]int, len(args))
	for k, a := range args {
		blocks[k] = a.Type.Shape[ax] * inner
	}
	switch {
	case out.F32 != nil:
		concat(out.F32, outer, blocks, args, func(t *Tensor) []float32 { return t.F32 })
	case out.F64 != nil:
		concat(out.F64, outer, blocks, args, func(t *Tensor) []float64 { return t.F64 })
	default:
		concat(out.Int, outer, blocks, args, func(t *Tensor) []int64 { return t.Int })
	}
	return nil
}

func concat[T number](d []T, outer int, blocks []int, args []*Tensor, data func(*Tensor) []T) {
	j := 0
	for o := range outer {
		for k, a := range args {
			b := blocks[k]
			copy(d[j:j+b], data(a)[o*b:(o+1)*b])
			j += b
		}
	}
}
