package kernels

import (
	"math"
	"testing"

	"github.com/autopar/autopar/ir"
	"github.com/stretchr/testify/require"
)

func TestGatherScatter(t *testing.T) {
	table := vals(typ(ir.F32, 3, 2), 0, 1, 10, 11, 20, 21)
	ids := vals(typ(ir.I32, 2, 2), 2, 0, 2, 1)
	g := eval(t, ir.OpGather, nil, table, ids)
	require.Equal(t, ir.Shape{2, 2, 2}, g.Type.Shape)
	requireClose(t, []float64{20, 21, 0, 1, 20, 21, 10, 11}, g, 0)

	s := eval(t, ir.OpScatterAdd, ir.Attrs{}.With("rows", 3), ids, g)
	requireClose(t, []float64{0, 1, 10, 11, 40, 42}, s, 0)

	_, err := evalInfer(ir.OpGather, nil, table, vals(typ(ir.I64, 2), 1, 3))
	require.ErrorContains(t, err, "gather: id 3 at position 1 is out of range [0, 3)")
	_, err = evalInfer(ir.OpScatterAdd, ir.Attrs{}.With("rows", 2), ids, g)
	require.ErrorContains(t, err, "out of range")
}

// TestGatherScatterAdjoint: <gather(T, ids), u> == <T, scatter_add(ids, u)>.
func TestGatherScatterAdjoint(t *testing.T) {
	r := rngFor(7)
	table := randT(r, typ(ir.F64, 6, 3, 2))
	ids := FromF64(ir.I64, ir.Shape{5}, []float64{5, 0, 5, 2, 1})
	u := randT(r, typ(ir.F64, 5, 3, 2))
	lhs := dot(eval(t, ir.OpGather, nil, table, ids), u)
	rhs := dot(table, eval(t, ir.OpScatterAdd, ir.Attrs{}.With("rows", 6), ids, u))
	require.InDelta(t, lhs, rhs, 1e-12)
}

func dot(a, b *Tensor) float64 {
	var s float64
	for i := range a.Len() {
		s += a.At(i) * b.At(i)
	}
	return s
}

func TestCrossEntropy(t *testing.T) {
	logits := vals(typ(ir.F64, 2, 3), 1, 2, 3, 1000, 0, 1000)
	labels := vals(typ(ir.I32, 2), 2, 1)
	lse := 3 + math.Log(math.Exp(-2)+math.Exp(-1)+1)
	got := eval(t, ir.OpSparseCrossEntropy, nil, logits, labels)
	requireClose(t, []float64{lse - 3, 1000 + math.Log(2)}, got, 1e-12)
	_, err := evalInfer(ir.OpSparseCrossEntropy, nil, logits, vals(typ(ir.I32, 2), 0, 3))
	require.ErrorContains(t, err, "label 3 at position 1 is out of range [0, 3)")
}
