package passes

import (
	"fmt"
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

// batchAt says where the batch lies in a value: dim Dim, whose extent is outer·B·Inner
// (a reshape may merge the batch with the dims around it). Dim < 0: the value does not
// carry the batch.
type batchAt struct{ Dim, Inner int }

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
			return batchAt{Dim: bd, Inner: 1}
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
			return batchAt{Dim: r, Inner: ba.Inner}
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

// reshapeBatch follows the batch through a reshape by its stride in the flat element order.
func reshapeBatch(in, out ir.Shape, ba batchAt, size int) batchAt {
	if ba.Dim < 0 {
		return noBatch
	}
	stride := ba.Inner
	for _, n := range in[ba.Dim+1:] {
		stride *= n
	}
	after := 1 // product of out's dims after r
	for r := len(out) - 1; r >= 0; r-- {
		if stride%after == 0 && stride/after*size <= out[r] && out[r]%(stride/after*size) == 0 {
			return batchAt{Dim: r, Inner: stride / after}
		}
		after *= out[r]
	}
	return batchAt{Dim: -2} // lost: checkRebatched reports it
}

// rebatchAttrs rewrites the shape attributes of value id that carry the batch.
func rebatchAttrs(g *ir.Graph, id ir.ValueID, at []batchAt, old, batch int) (ir.Attrs, error) {
	v := &g.Values[id]
	ba := at[id]
	switch {
	case v.Op == ir.OpInput && ba.Dim >= 0:
		t := v.Type
		t.Shape = slices.Clone(t.Shape)
		t.Shape[ba.Dim] = t.Shape[ba.Dim] / old * batch
		return v.Attrs.With("type", t), nil
	case (v.Op == ir.OpReshape || v.Op == ir.OpBroadcast) && ba.Dim >= 0:
		shape := slices.Clone(v.Attrs.Ints("shape"))
		shape[ba.Dim] = shape[ba.Dim] / old * batch
		return v.Attrs.With("shape", shape), nil
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

// checkRebatched makes sure the batch went where followBatch said it would.
func checkRebatched(old, now *ir.Value, ba batchAt, oldB, newB int) error {
	if ba.Dim == -2 {
		return ir.Errorf(old.Pos, "cannot micro-batch: reshape %s splits the batch dim across dims", old.Name)
	}
	want := slices.Clone(old.Type.Shape)
	if ba.Dim >= 0 {
		want[ba.Dim] = want[ba.Dim] / oldB * newB
	}
	if !slices.Equal(want, now.Type.Shape) {
		return ir.Errorf(old.Pos, "cannot micro-batch: %s becomes %s, expected shape %v", old.Name, now.Type, want)
	}
	return nil
}
