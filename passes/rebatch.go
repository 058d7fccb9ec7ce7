package passes

import (
	"fmt"
	"math/bits"
	"slices"

	"github.com/autopar/autopar/ir"
)

// BatchSize returns the batch size of g: the extent of the batch dim shared by every data
// input that has one. It is an error for two inputs to disagree or for none to have one.
func BatchSize(g *ir.Graph) (int, error) {
	size, from := 0, ""
	for i := range g.Values {
		v := &g.Values[i]
		bd := v.BatchDim()
		if bd < 0 {
			continue
		}
		n := v.Type.Shape[bd]
		if size != 0 && n != size {
			return 0, ir.Errorf(v.Pos, "input %s has batch %d but input %s has batch %d", v.Name, n, from, size)
		}
		size, from = n, v.Name
	}
	if size == 0 {
		return 0, fmt.Errorf("graph %s has no data input with a batch dim", g.Name)
	}
	return size, nil
}

// batchAt says where the batch lies in a value: dim Dim, whose extent is outer·Part·Inner.
// Part is the batch B itself, or, once a reshape has split the batch over several dims (MoE
// groups: [B, T, H] → [B/k, k, T, H]), the major part B/k that Dim carries; the minor dims
// keep their extent. Dim < 0: the value does not carry the batch.
type batchAt struct{ Dim, Inner, Part int }

var noBatch = batchAt{Dim: -1}

// Rebatch returns g with every data input's batch dim set to batch, and every shape that
// follows the batch rescaled: smaller, it is the graph of one micro-batch; larger, the
// model at a bigger batch. The batch is followed through
// each op's dims signature, and through reshapes by its element stride, so reshape and
// broadcast targets are rewritten where they carry it. A graph whose ops mix the batch
// with something that cannot be rescaled (a slice or concat along it, a constant of its
// size) is an error naming the value, never a silently wrong graph.
//
// A micro-batch's gradient equals the full batch's only for a loss that is a mean over the
// batch; the caller accumulates micro-batch gradients with weight 1/B.
func Rebatch(g *ir.Graph, batch int) (*ir.Graph, error) {
	old, err := BatchSize(g)
	if err != nil {
		return nil, err
	}
	if batch < 1 {
		return nil, fmt.Errorf("batch size %d of graph %s must be at least 1", batch, g.Name)
	}
	if batch == old {
		return g.Clone(), nil
	}
	at := make([]batchAt, len(g.Values))
	out := ir.NewGraph(g.Name)
	for i := range g.Values {
		v := &g.Values[i]
		at[i] = followBatch(g, ir.ValueID(i), at, old)
		attrs, err := rebatchAttrs(g, ir.ValueID(i), at, old, batch)
		if err != nil {
			return nil, err
		}
		id, err := out.Append(v.Op, v.Name, v.Args, attrs, v.Pos)
		if err != nil {
			return nil, fmt.Errorf("cannot micro-batch: %w", err)
		}
		if err := checkRebatched(v, out.Value(id), at[i], old, batch); err != nil {
			return nil, err
		}
		out.SetProv(id, v.Prov) // same IDs: Of still names the same value
		out.Value(id).Block = v.Block
	}
	for _, o := range g.Outputs {
		out.AddOutput(o.Value, o.Pos)
	}
	for _, u := range g.Updates {
		out.AddUpdate(u.Target, u.Value, u.Pos)
	}
	return out, nil
}

// followBatch finds where the batch lies in value id from where it lies in its operands.
func followBatch(g *ir.Graph, id ir.ValueID, at []batchAt, size int) batchAt {
	v := &g.Values[id]
	if v.Op == ir.OpInput {
		if bd := v.BatchDim(); bd >= 0 {
			return batchAt{Dim: bd, Inner: 1, Part: size}
		}
		return noBatch
	}
	if v.Op.IsLeaf() || len(v.Args) == 0 {
		return noBatch
	}
	if v.Op == ir.OpReshape {
		return reshapeBatch(g.Values[v.Args[0]].Type.Shape, v.Type.Shape, at[v.Args[0]], size)
	}
	d := g.Dims(id)
	for i, a := range v.Args {
		ba := at[a]
		if ba.Dim < 0 || ba.Dim >= len(d.Operands[i]) {
			continue
		}
		l := d.Operands[i][ba.Dim]
		if r := slices.Index(d.Result, l); l >= 0 && r >= 0 {
			return batchAt{Dim: r, Inner: ba.Inner, Part: ba.Part}
		}
	}
	return noBatch
}

// BatchDims returns, per value of g, the dim that carries the batch of the data inputs, or
// -1 where the value does not carry it (params, the loss, a batch merged into another dim
// counts as carried by that dim).
func BatchDims(g *ir.Graph) []int {
	size, err := BatchSize(g)
	dims := make([]int, len(g.Values))
	at := make([]batchAt, len(g.Values))
	for i := range g.Values {
		dims[i] = -1
		if err != nil {
			continue
		}
		at[i] = followBatch(g, ir.ValueID(i), at, size)
		dims[i] = max(at[i].Dim, -1)
	}
	return dims
}

// reshapeBatch follows the batch through a reshape by its stride in the flat element order:
// into the one output dim that holds it whole, or, when the reshape splits it, into the
// outermost of the output dims that hold it exactly.
func reshapeBatch(in, out ir.Shape, ba batchAt, _ int) batchAt {
	if ba.Dim < 0 {
		return noBatch
	}
	stride := ba.Inner // flat stride of one step along the batch
	for _, n := range in[ba.Dim+1:] {
		stride *= n
	}
	after := make([]int, len(out)+1) // after[r]: product of out's dims after r
	after[len(out)] = 1
	for r := len(out) - 1; r >= 0; r-- {
		after[r] = after[r+1] * out[r]
	}
	for r := len(out) - 1; r >= 0; r-- {
		a := after[r+1]
		if stride%a == 0 && stride/a*ba.Part <= out[r] && out[r]%(stride/a*ba.Part) == 0 {
			return batchAt{Dim: r, Inner: stride / a, Part: ba.Part}
		}
	}
	// Split: dims r0..r1 hold exactly the batch, r1's unit being the batch's stride.
	for r1 := len(out) - 1; r1 >= 0; r1-- {
		if after[r1+1] != stride {
			continue
		}
		for r0 := r1 - 1; r0 >= 0; r0-- {
			if after[r0]/after[r1+1] == ba.Part {
				return batchAt{Dim: r0, Inner: 1, Part: out[r0]}
			}
		}
	}
	return batchAt{Dim: -2} // lost: checkRebatched reports it
}

// scaled is the extent a batch-carrying dim of extent n gets when the batch goes from old
// to batch, or an error when the part of the batch it carries does not scale to a whole.
//
// The products are taken in 128 bits: an extent past ir.MaxElements comes back as
// ir.MaxElements+1, which ir then refuses as too large, instead of a wrapped small one.
func scaled(n int, ba batchAt, old, batch int) (int, bool) {
	hi, lo := bits.Mul64(uint64(ba.Part), uint64(batch))
	if hi >= uint64(old) { // the quotient would not fit 64 bits
		return ir.MaxElements + 1, true
	}
	q, r := bits.Div64(hi, lo, uint64(old))
	if r != 0 {
		return 0, false
	}
	hi, lo = bits.Mul64(uint64(n/ba.Part), q)
	if hi != 0 || lo > ir.MaxElements {
		return ir.MaxElements + 1, true
	}
	return int(lo), true
}

// rebatchAttrs rewrites the shape attributes of value id that carry the batch.
func rebatchAttrs(g *ir.Graph, id ir.ValueID, at []batchAt, old, batch int) (ir.Attrs, error) {
	v := &g.Values[id]
	ba := at[id]
	switch {
	case ba.Dim == -2:
		return nil, ir.Errorf(v.Pos, "cannot micro-batch: reshape %s mixes the batch with other dims", v.Name)
	case ba.Dim >= 0 && (v.Op == ir.OpInput || v.Op == ir.OpReshape || v.Op == ir.OpBroadcast):
		n, ok := scaled(v.Type.Shape[ba.Dim], ba, old, batch)
		if !ok {
			return nil, ir.Errorf(v.Pos, "cannot micro-batch: %s splits the batch into groups of %d, which batch %d does not fill",
				v.Name, old/ba.Part, batch)
		}
		if v.Op == ir.OpInput {
			t := v.Type
			t.Shape = slices.Clone(t.Shape)
			t.Shape[ba.Dim] = n
			return v.Attrs.With("type", t), nil
		}
		shape := slices.Clone(v.Attrs.Ints("shape"))
		shape[ba.Dim] = n
		return v.Attrs.With("shape", shape), nil
	case v.Op == ir.OpBatchNorm && at[v.Args[0]].Dim == 0 && batchNormGroup(v) > 0:
		// Statistics over groups of k rows: the groups stay k rows, so the batch must hold
		// whole groups; a batch of one group is the plain batch_norm (group 0).
		k := batchNormGroup(v)
		n, ok := scaled(g.Values[v.Args[0]].Type.Shape[0], at[v.Args[0]], old, batch)
		if !ok || n%k != 0 {
			return nil, ir.Errorf(v.Pos, "cannot micro-batch: batch_norm %s takes its statistics over groups of %d rows of %s, which a batch of %d does not hold whole",
				v.Name, k, g.Values[v.Args[0]].Name, batch)
		}
		if n == k {
			return v.Attrs.With("group", 0), nil
		}
		return v.Attrs, nil
	case v.Op == ir.OpSlice && fullBatchSlice(g, v, at):
		// A slice that keeps the whole batch (Split of an imported model's fused qkv) takes
		// the micro-batch whole: its limit on the batch dim is rescaled like a reshape's.
		d := at[v.Args[0]].Dim
		limit := slices.Clone(v.Attrs.Ints("limit"))
		limit[d], _ = scaled(limit[d], at[v.Args[0]], old, batch)
		return v.Attrs.With("limit", limit), nil
	case v.Op == ir.OpSlice || v.Op == ir.OpConcat || v.Op == ir.OpScatterAdd ||
		v.Op == ir.OpConv2DInputGrad || v.Op == ir.OpAvgPoolGrad:
		for _, a := range v.Args {
			if at[a].Dim >= 0 {
				return nil, ir.Errorf(v.Pos, "cannot micro-batch: %s %s takes the batch of %s and has sizes in its attributes",
					v.Op, v.Name, g.Values[a].Name)
			}
		}
	}
	return v.Attrs, nil
}

// fullBatchSlice reports whether slice v takes the batch dim of its operand whole.
func fullBatchSlice(g *ir.Graph, v *ir.Value, at []batchAt) bool {
	ba := at[v.Args[0]]
	if ba.Dim < 0 || at[v.Args[0]].Dim == -2 {
		return false
	}
	d, in := ba.Dim, g.Values[v.Args[0]].Type.Shape
	return v.Attrs.Ints("start")[d] == 0 && v.Attrs.Ints("limit")[d] == in[d]
}

// checkRebatched makes sure the batch went where followBatch said it would.
func checkRebatched(old, now *ir.Value, ba batchAt, oldB, newB int) error {
	if ba.Dim == -2 {
		return ir.Errorf(old.Pos, "cannot micro-batch: reshape %s splits the batch dim across dims", old.Name)
	}
	want := slices.Clone(old.Type.Shape)
	if ba.Dim >= 0 {
		want[ba.Dim], _ = scaled(want[ba.Dim], ba, oldB, newB)
	}
	if !slices.Equal(want, now.Type.Shape) {
		return ir.Errorf(old.Pos, "cannot micro-batch: %s becomes %s, expected shape %v", old.Name, now.Type, want)
	}
	return nil
}

// BatchCoupled returns the first op of g that couples the samples of different
// micro-batches when its batch is split into b: one whose dims signature fixes (must not
// split) the dim an operand carries the batch in, or a batch_norm (the op table's
// SyncStats: statistics over its batch, dim 0, which a data-parallel split keeps exact by
// all-reducing them) whose statistics run over the whole batch, or over groups of rows
// (attribute group) that a micro-batch does not hold whole. Splitting such a graph into b
// micro-batches changes what it computes; ok is false when no op does (always for b = 1).
func BatchCoupled(g *ir.Graph, b int) (id ir.ValueID, ok bool) {
	if b <= 1 {
		return 0, false
	}
	size, err := BatchSize(g)
	if err != nil {
		return 0, false
	}
	at := make([]batchAt, len(g.Values))
	for i := range g.Values {
		at[i] = followBatch(g, ir.ValueID(i), at, size)
	}
	for i := range g.Values {
		v := &g.Values[i]
		if v.Op.IsLeaf() || v.Op == ir.OpReshape || len(v.Args) == 0 {
			continue
		}
		d := g.Dims(ir.ValueID(i))
		for k, a := range v.Args {
			bd := at[a].Dim
			if bd < 0 || bd >= len(d.Operands[k]) {
				continue
			}
			if k == 0 && bd == 0 && v.Op.Def().SyncStats > 0 {
				if statsCoupled(g, v, at[a], size, b) {
					return ir.ValueID(i), true
				}
				continue
			}
			if l := d.Operands[k][bd]; l >= 0 && d.Fixed[l] {
				return ir.ValueID(i), true
			}
		}
	}
	return 0, false
}

// statsCoupled reports whether batch_norm v, whose first operand carries the batch (of
// size) in dim 0 as ba says, takes statistics across the samples of different micro-batches
// when the batch is split into b: over the whole batch, or over groups of rows that are not
// each inside one micro-batch (a micro-batch's rows are contiguous only when dim 0 holds the
// batch alone).
func statsCoupled(g *ir.Graph, v *ir.Value, ba batchAt, size, b int) bool {
	k := batchNormGroup(v)
	n := g.Values[v.Args[0]].Type.Shape[0]
	return k == 0 || ba.Part != size || ba.Inner*ba.Part != n || size%b != 0 || (n/b)%k != 0
}

// batchNormGroup is v's group attribute (0: the whole batch).
func batchNormGroup(v *ir.Value) int {
	x, _ := v.Attrs.Get("group")
	k, _ := x.(int)
	return k
}

// PerMicrobatchStats returns g with the statistics of every batch_norm that takes them over
// the whole batch taken per micro-batch of the batch split into b instead (attribute group:
// the rows of one micro-batch): what GPipe and Alpa compute when they pipeline a model with
// batch norm. It is what a plan with b micro-batches under Options.BatchNorm "microbatch"
// computes, and its serial reference. A batch_norm whose dim 0 holds more than the batch
// (the batch merged with another dim) cannot be split so and is an error; one with a group
// of its own, or whose dim 0 does not carry the batch, is left as it is.
func PerMicrobatchStats(g *ir.Graph, b int) (*ir.Graph, error) {
	size, err := BatchSize(g)
	if err != nil {
		return nil, err
	}
	if b < 1 || size%b != 0 {
		return nil, fmt.Errorf("the batch %d of graph %s is not divisible by %d micro-batches", size, g.Name, b)
	}
	out := g.Clone()
	if b == 1 {
		return out, nil
	}
	at := make([]batchAt, len(g.Values))
	for i := range g.Values {
		at[i] = followBatch(g, ir.ValueID(i), at, size)
		v := &out.Values[i]
		if v.Op != ir.OpBatchNorm || batchNormGroup(v) != 0 || at[v.Args[0]].Dim != 0 {
			continue
		}
		ba, n := at[v.Args[0]], g.Values[v.Args[0]].Type.Shape[0]
		if ba.Part != size || ba.Inner*ba.Part != n {
			return nil, ir.Errorf(v.Pos, "cannot take the statistics of batch_norm %s per micro-batch: dim 0 of %s (%d) holds the batch %d merged with other dims",
				v.Name, g.Values[v.Args[0]].Name, n, size)
		}
		v.Attrs = v.Attrs.With("group", n/b)
	}
	if err := ir.Verify(out); err != nil {
		return nil, fmt.Errorf("per-micro-batch statistics: %w", err)
	}
	return out, nil
}
