package sharding

import "github.com/autopar/autopar/ir"

// ruleOf reads the op's row of the ir op table and adds what neither the row nor the dims
// signature says.
//
//   - A split contracted label is offered when the row's Partial is lowerable (a sum:
//     contractions, sums, convolutions, scatter_add, gather), finished by an all-reduce or a
//     reduce-scatter. reduce_max's partial is a max, which the program's collectives
//     cannot finish, so its reduced dims stay whole (ir.Partial.Lowerable); codegen reads
//     the same row and refuses exactly what is not offered here.
//   - gather's vocabulary dim is contracted and its partial a sum: the vocab-parallel
//     embedding (Megatron's), which codegen lowers as a masked lookup at the shard's offset.
//   - sparse_cross_entropy's class dim is Fixed by its signature: the vocab-parallel
//     cross-entropy (all-reduces of a max and two sums inside the op) is valid but codegen
//     does not emit it (docs/DECISIONS.md).
//   - Data inputs: only the batch dim may be split (the loader places the data); every
//     other dim of an input is fixed, reachable still by a free slice at the consumer.
//   - Conv: its signature already splits batch and output channels and contracts input
//     channels; spatial dims stay fixed (halos are not modelled). Softmax, layer-norm and
//     cross-entropy rows are fixed by their signatures; reshape maps dim groups there too.
//   - batch_norm's batch may be split: its row's SyncStats adds the all-reduces of its
//     per-channel mean and variance over the batch's axes (syncStats); codegen lowers them.
func ruleOf(g *ir.Graph, id ir.ValueID) rule {
	v := g.Value(id)
	def := v.Op.Def()
	d := g.Dims(id)
	r := rule{dims: d, reduce: def.Partial.String(), heavy: def.Heavy}
	r.partialOK = def.Partial.Lowerable()
	r.scatterOK = r.partialOK
	if v.Op == ir.OpInput {
		d.Fixed = append([]bool(nil), d.Fixed...)
		b := v.BatchDim()
		for i, l := range d.Result {
			d.Fixed[l] = i != b
		}
		r.dims = d
	}
	return r
}
