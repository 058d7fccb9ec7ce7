package kernels

import (
	"slices"
	"strings"

	"github.com/autopar/autopar/ir"
)

var _ = register(map[ir.Op]kernel{
	ir.OpMatMul: evalMatMul,
	ir.OpEinsum: evalEinsum,
})

// Contractions. matmul is one gemm; einsum reduces to sums over labels only one operand
// has, transposes into [batch, free, contracted] order, and batched gemms, folding its
// operands left to right.

func evalMatMul(_ ir.Op, _ ir.Attrs, out *Tensor, args []*Tensor) error {
	a, b := args[0], args[1]
	m, k, n := a.Type.Shape[0], a.Type.Shape[1], b.Type.Shape[1]
	switch {
	case out.F32 != nil:
		gemm(false, false, view(a.F32, m, k), view(b.F32, k, n), 0, view(out.F32, m, n))
	case out.F64 != nil:
		gemm(false, false, view(a.F64, m, k), view(b.F64, k, n), 0, view(out.F64, m, n))
	default:
		gemm(false, false, view(a.Int, m, k), view(b.Int, k, n), 0, view(out.Int, m, n))
	}
	return nil
}

// labeled is an einsum operand: data with one label (a letter) per dim.
type labeled[T number] struct {
	data   []T
	shape  []int
	labels string
}

func evalEinsum(_ ir.Op, at ir.Attrs, out *Tensor, args []*Tensor) error {
	lhs, res, _ := strings.Cut(at.String("spec"), "->")
	specs := strings.Split(lhs, ",")
	switch {
	case out.F32 != nil:
		einsum(out.F32, res, specs, args, func(t *Tensor) []float32 { return t.F32 })
	case out.F64 != nil:
		einsum(out.F64, res, specs, args, func(t *Tensor) []float64 { return t.F64 })
	default:
		einsum(out.Int, res, specs, args, func(t *Tensor) []int64 { return t.Int })
	}
	return nil
}

func einsum[T number](d []T, res string, specs []string, args []*Tensor, data func(*Tensor) []T) {
	ops := make([]labeled[T], len(args))
	for i, a := range args {
		ops[i] = labeled[T]{data: data(a), shape: a.Type.Shape, labels: specs[i]}
	}
	acc := ops[0]
	for i := 1; i < len(ops); i++ {
		needed := res + strings.Join(specs[i+1:], "")
		acc = contractPair(acc, ops[i], needed)
	}
	acc = sumOut(acc, res)
	copy(d, permuteTo(acc, res).data)
}

// contractPair multiplies x and y, summing over every label that neither the labels in
// keep nor the other operand needs. The result's labels are batch, x-free, y-free.
func contractPair[T number](x, y labeled[T], keep string) labeled[T] {
	x = sumOut(x, keep+y.labels)
	y = sumOut(y, keep+x.labels)
	var batch, contr, xf, yf string
	for _, c := range x.labels {
		switch {
		case !strings.ContainsRune(y.labels, c):
			xf += string(c)
		case strings.ContainsRune(keep, c):
			batch += string(c)
		default:
			contr += string(c)
		}
	}
	for _, c := range y.labels {
		if !strings.ContainsRune(x.labels, c) {
			yf += string(c)
		}
	}
	x = permuteTo(x, batch+xf+contr)
	y = permuteTo(y, batch+contr+yf)
	size := labelSizes(x, y)
	nb, m, k, n := size(batch), size(xf), size(contr), size(yf)
	out := labeled[T]{data: make([]T, nb*m*n), labels: batch + xf + yf}
	for _, c := range out.labels {
		out.shape = append(out.shape, size(string(c)))
	}
	for b := range nb {
		gemm(false, false, view(x.data[b*m*k:], m, k), view(y.data[b*k*n:], k, n), 0, view(out.data[b*m*n:], m, n))
	}
	return out
}

// labelSizes returns a function giving the product of the sizes of some labels.
func labelSizes[T number](ops ...labeled[T]) func(string) int {
	return func(ls string) int {
		p := 1
		for _, c := range ls {
			for _, o := range ops {
				if i := strings.IndexRune(o.labels, c); i >= 0 {
					p *= o.shape[i]
					break
				}
			}
		}
		return p
	}
}

// sumOut sums x over its labels that are not in keep; x comes back unchanged if none.
func sumOut[T number](x labeled[T], keep string) labeled[T] {
	var kept string
	var axes []int
	var shape []int
	for i, c := range x.labels {
		if strings.ContainsRune(keep, c) {
			kept += string(c)
			shape = append(shape, x.shape[i])
		} else {
			axes = append(axes, i)
		}
	}
	if len(axes) == 0 {
		return x
	}
	d := make([]T, ir.Shape(shape).NumElements())
	reduceAxes(ir.OpReduceSum, d, x.data, x.shape, axes)
	return labeled[T]{data: d, shape: shape, labels: kept}
}

// permuteTo transposes x so its labels read order, a permutation of them; no copy if they
// already do.
func permuteTo[T number](x labeled[T], order string) labeled[T] {
	if x.labels == order {
		return x
	}
	perm := make([]int, len(order))
	shape := make([]int, len(order))
	for i, c := range order {
		perm[i] = strings.IndexRune(x.labels, c)
		shape[i] = x.shape[perm[i]]
	}
	d := make([]T, len(x.data))
	permute(d, x.data, x.shape, perm)
	return labeled[T]{data: d, shape: shape, labels: order}
}

// permute writes into d the transpose of x (of shape s) whose dim i is x's dim perm[i].
func permute[T number](d, x []T, s []int, perm []int) {
	xs := contiguous(s)
	st := make([]int, len(perm))
	shape := make(ir.Shape, len(perm))
	for i, p := range perm {
		st[i], shape[i] = xs[p], s[p]
	}
	if slices.Equal(perm, identity(len(perm))) {
		copy(d, x)
		return
	}
	stridedCopy(stridedWalk(shape, st, 0), d, x)
}

func identity(n int) []int {
	p := make([]int, n)
	for i := range p {
		p[i] = i
	}
	return p
}
