package kernels

import (
	"fmt"
	"math"

	"github.com/autopar/autopar/ir"
)

var _ = register(map[ir.Op]kernel{
	ir.OpGather:             evalGather,
	ir.OpScatterAdd:         evalScatterAdd,
	ir.OpSparseCrossEntropy: evalCrossEntropy,
})

// Gather, scatter_add and sparse_cross_entropy: the ops that index with integer data, and
// so the ones whose errors depend on values (an id out of range).

// evalGather copies row ids[i] of the table [V, D...] to row i of the result [B..., D...].
func evalGather(_ ir.Op, _ ir.Attrs, out *Tensor, args []*Tensor) error {
	table, ids := args[0], args[1]
	rows := table.Type.Shape[0]
	row := int(table.Type.Shape[1:].NumElements())
	for i, id := range ids.Int {
		if id < 0 || id >= int64(rows) {
			return fmt.Errorf("id %d at position %d is out of range [0, %d)", id, i, rows)
		}
		src, dst := int(id)*row, i*row
		switch {
		case out.F32 != nil:
			copy(out.F32[dst:dst+row], table.F32[src:src+row])
		case out.F64 != nil:
			copy(out.F64[dst:dst+row], table.F64[src:src+row])
		default:
			copy(out.Int[dst:dst+row], table.Int[src:src+row])
		}
	}
	return nil
}

// evalScatterAdd sums row i of the updates [B..., D...] into row ids[i] of the zero result
// [rows, D...]: gather's adjoint.
func evalScatterAdd(_ ir.Op, at ir.Attrs, out *Tensor, args []*Tensor) error {
	ids, upd := args[0], args[1]
	rows := at.Int("rows")
	row := int(out.Type.Shape[1:].NumElements())
	for i, id := range ids.Int {
		if id < 0 || id >= int64(rows) {
			return fmt.Errorf("id %d at position %d is out of range [0, %d)", id, i, rows)
		}
		dst, src := int(id)*row, i*row
		switch {
		case out.F32 != nil:
			addTo(out.F32[dst:dst+row], upd.F32[src:src+row])
		case out.F64 != nil:
			addTo(out.F64[dst:dst+row], upd.F64[src:src+row])
		default:
			addTo(out.Int[dst:dst+row], upd.Int[src:src+row])
		}
	}
	return nil
}

func addTo[T number](d, x []T) {
	for i, v := range x {
		d[i] += v
	}
}

// evalCrossEntropy gives, per example, -log softmax(logits)[label] = logsumexp(logits) -
// logits[label], from logits [B..., C] and labels [B...], with the max subtracted first.
func evalCrossEntropy(_ ir.Op, _ ir.Attrs, out *Tensor, args []*Tensor) error {
	logits, labels := args[0], args[1]
	c := logits.Type.Shape[logits.Type.Shape.Rank()-1]
	for i, l := range labels.Int {
		if l < 0 || l >= int64(c) {
			return fmt.Errorf("label %d at position %d is out of range [0, %d)", l, i, c)
		}
	}
	if out.F32 != nil {
		crossEntropy(out.F32, logits.F32, labels.Int, c)
	} else {
		crossEntropy(out.F64, logits.F64, labels.Int, c)
	}
	return nil
}

func crossEntropy[T float](d, logits []T, labels []int64, c int) {
	for i, l := range labels {
		row := logits[i*c : (i+1)*c]
		m := math.Inf(-1)
		for _, v := range row {
			m = max(m, float64(v))
		}
		var s float64
		for _, v := range row {
			s += math.Exp(float64(v) - m)
		}
		d[i] = T(m + math.Log(s) - float64(row[l]))
	}
}
