package kernels

import (
	"fmt"
	"strings"
	"testing"

	"github.com/autopar/autopar/ir"
	"github.com/stretchr/testify/require"
)

// TestEveryOpHasAKernel keeps the table honest: a new op row without a kernel fails here,
// a leaf has none, and a second registration of an op is refused (register panics, so a
// duplicate across files fails at package initialization).
func TestEveryOpHasAKernel(t *testing.T) {
	for _, op := range ir.AllOps() {
		_, err := lookup(op)
		if op.IsLeaf() {
			require.Nil(t, kernels[op], op.String())
			require.Error(t, err, op.String())
			continue
		}
		require.NoError(t, err, op.String())
	}
	require.PanicsWithValue(t, "kernels: add is registered twice", func() { register(map[ir.Op]kernel{ir.OpAdd: evalWhere}) })
}

func TestMatMul(t *testing.T) {
	a := [][]float64{{1, 2, 3}, {4, 5, 6}}
	b := [][]float64{{1, 0}, {0, 1}, {2, -1}}
	want := []float64{7, -1, 16, -1}
	for _, dt := range []ir.DType{ir.F32, ir.F64, ir.I64, ir.I32, ir.BF16} {
		t.Run(dt.String(), func(t *testing.T) {
			got := eval(t, ir.OpMatMul, nil, vals(typ(dt, 2, 3), flat(a)...), vals(typ(dt, 3, 2), flat(b)...))
			requireClose(t, want, got, 0)
		})
	}
	r := rngFor(2)
	for _, s := range [][3]int{{1, 1, 1}, {5, 7, 3}, {33, 17, 65}} {
		x, y := randT(r, typ(ir.F64, s[0], s[1])), randT(r, typ(ir.F64, s[1], s[2]))
		requireClose(t, naiveMatMul(x, y), eval(t, ir.OpMatMul, nil, x, y), 1e-12)
	}
}

func flat(m [][]float64) []float64 {
	var out []float64
	for _, r := range m {
		out = append(out, r...)
	}
	return out
}

func naiveMatMul(a, b *Tensor) []float64 {
	m, k, n := a.Type.Shape[0], a.Type.Shape[1], b.Type.Shape[1]
	out := make([]float64, m*n)
	for i := range m {
		for j := range n {
			for p := range k {
				out[i*n+j] += a.At(i*k+p) * b.At(p*n+j)
			}
		}
	}
	return out
}

// TestEinsumRandom compares einsum on random specs against a loop over the whole iteration
// space.
func TestEinsumRandom(t *testing.T) {
	r := rngFor(3)
	fixed := []string{"bmk,bkn->bmn", "ij->ji", "ij->", "i,j->ij", "ij,ij->i", "bhqd,bhkd->bhqk", "abc,cd,de->abe", "ijk->ki"}
	specs := append([]string(nil), fixed...)
	for range 40 {
		specs = append(specs, randomSpec(r))
	}
	for _, spec := range specs {
		for _, dt := range []ir.DType{ir.F64, ir.F32, ir.I64} {
			t.Run(spec+"/"+dt.String(), func(t *testing.T) {
				size := map[rune]int{}
				lhs, res, _ := strings.Cut(spec, "->")
				var args []*Tensor
				for _, ls := range strings.Split(lhs, ",") {
					var dims []int
					for _, c := range ls {
						if size[c] == 0 {
							size[c] = 1 + r.IntN(4)
						}
						dims = append(dims, size[c])
					}
					args = append(args, randT(r, typ(dt, dims...)))
				}
				got := eval(t, ir.OpEinsum, ir.Attrs{}.With("spec", spec), args...)
				tol := 1e-10
				if dt == ir.F32 {
					tol = 1e-4
				}
				requireClose(t, naiveEinsum(lhs, res, size, args), got, tol)
			})
		}
	}
}

// randomSpec draws 1 to 3 operands of rank 0 to 3 over labels a..f and a result of some
// of their labels, in random order.
func randomSpec(r interface{ IntN(int) int }) string {
	labels := []rune("abcdef")
	n := 1 + r.IntN(3)
	var ops []string
	used := map[rune]bool{}
	for range n {
		perm := []rune(string(labels))
		for i := len(perm) - 1; i > 0; i-- {
			j := r.IntN(i + 1)
			perm[i], perm[j] = perm[j], perm[i]
		}
		k := r.IntN(4)
		for _, c := range perm[:k] {
			used[c] = true
		}
		ops = append(ops, string(perm[:k]))
	}
	var res []rune
	for _, c := range labels {
		if used[c] && r.IntN(2) == 0 {
			res = append(res, c)
		}
	}
	for i := len(res) - 1; i > 0; i-- {
		j := r.IntN(i + 1)
		res[i], res[j] = res[j], res[i]
	}
	return strings.Join(ops, ",") + "->" + string(res)
}

func naiveEinsum(lhs, res string, size map[rune]int, args []*Tensor) []float64 {
	var all []rune
	for _, c := range "abcdefghijklmnopqrstuvwxyz" {
		if size[c] > 0 {
			all = append(all, c)
		}
	}
	outN := 1
	for _, c := range res {
		outN *= size[c]
	}
	out := make([]float64, outN)
	idx := map[rune]int{}
	flatOf := func(ls string) int {
		f := 0
		for _, c := range ls {
			f = f*size[c] + idx[c]
		}
		return f
	}
	specs := strings.Split(lhs, ",")
	var rec func(int)
	rec = func(d int) {
		if d == len(all) {
			p := 1.0
			for i, a := range args {
				p *= a.At(flatOf(specs[i]))
			}
			out[flatOf(res)] += p
			return
		}
		for i := range size[all[d]] {
			idx[all[d]] = i
			rec(d + 1)
		}
	}
	rec(0)
	return out
}

func TestEinsumErrors(t *testing.T) {
	a := New(typ(ir.F32, 2, 3))
	_, err := Eval(ir.OpEinsum, ir.Attrs{}.With("spec", "ij,jk->ik"), typ(ir.F32, 2, 2), []*Tensor{a, a})
	require.ErrorContains(t, err, "label j is 3")
	_, err = Eval(ir.OpEinsum, ir.Attrs{}.With("spec", "ij->ji"), typ(ir.F32, 2, 3), []*Tensor{a})
	require.ErrorContains(t, err, fmt.Sprint("result type is f32[2,3] but the operands give f32[3,2]"))
}
