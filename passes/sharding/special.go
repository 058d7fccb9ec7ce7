package sharding

import "github.com/autopar/autopar/ir"

// ruleOf reads the op's row and adds what its dims signature alone does not say.
//
//   - Contractions, reductions, scatter_add and the convolutions sum over their contracted
//     labels, so splitting one leaves a partial sum: offered, finished by an all-reduce or
//     a reduce-scatter. reduce_max's partial is a max, finished by an all-reduce only.
//   - gather: the signature fixes the vocabulary dim; here it is freed, as a masked lookup
//     whose partial rows sum (Megatron's vocab-parallel embedding).
//   - sparse_cross_entropy: the class dim is freed; each device works on its slice of the
//     classes and the op all-reduces a max, a sum of exponentials and the target logit,
//     each the size of its result (Megatron's vocab-parallel cross-entropy).
//   - Data inputs: only the batch dim may be split (the loader places the data); every
//     other dim of an input is fixed, reachable still by a free slice at the consumer.
//   - Conv: its signature already splits batch and output channels and contracts input
//     channels; spatial dims stay fixed (halos are not modelled). Softmax, layer-norm and
//     cross-entropy rows are fixed by their signatures; reshape maps dim groups there too.
func ruleOf(g *ir.Graph, id ir.ValueID) rule {
	v := g.Value(id)
	d := g.Dims(id)
	d.Fixed = append([]bool(nil), d.Fixed...)
	r := rule{dims: d, reduce: "sum"}
	switch v.Op {
	case ir.OpMatMul, ir.OpEinsum, ir.OpConv2D, ir.OpConv2DInputGrad, ir.OpConv2DFilterGrad:
		r.partialOK, r.scatterOK, r.heavy = true, true, true
	case ir.OpReduceSum, ir.OpReduceMean, ir.OpScatterAdd:
		r.partialOK, r.scatterOK = true, true
	case ir.OpReduceMax:
		r.partialOK, r.reduce = true, "max"
	case ir.OpGather:
		r.dims.Fixed[r.dims.Operands[0][0]] = false
		r.partialOK, r.scatterOK = true, true
	case ir.OpSparseCrossEntropy:
		logits := r.dims.Operands[0]
		c := logits[len(logits)-1]
		r.dims.Fixed[c] = false
		r.internalAR = map[int][]string{c: {"max", "sum", "sum"}}
	case ir.OpInput:
		b := v.BatchDim()
		for i, l := range r.dims.Result {
			r.dims.Fixed[l] = i != b
		}
	}
	return r
}
