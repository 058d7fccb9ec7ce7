package sharding

import (
	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/mesh"
)

// The 4-D einsum cut (not exact; Options.FullEinsums turns it off). The attention
// einsums — contractions whose operands and result all have rank 4 or more, such as
// bhqd,bhkd→bhqk and its gradients — have batch labels (b and h: in every operand and in
// the result) and other labels, and on a 2-D mesh some 70 strategies each, whose 4-D
// layouts give their edges the most transport variables of a transformer's ILP. The cut
// keeps a strategy only if every mesh axis it splits a non-batch label on is one no batch
// label can take (no batch label's size is divisible by the axis). The reason: on an axis
// where a batch label could go instead, splitting a non-batch label costs the same FLOPs
// per device and is worse inside the op — a contracted label leaves a partial result of
// the output's size (the s×s attention matrix) to all-reduce or reduce-scatter, a label of
// one operand makes the other operand whole on that axis — while the batch split needs no
// collective and reads less. What the cut gives up is the plans whose neighbours prefer
// the non-batch layout (sequence-parallel attention), which the measured plans never
// chose: docs/DECISIONS.md and BENCHMARKS.md (issue 13, smaller ILPs) give the effect.
// Replicating an axis stays allowed (the tiny models' plans replicate attention). The same
// rule covers GShard's expert einsums, whose weights are 3-D (cutLabels below).

// cutEinsums drops, in every group without a forced member, the group strategies that
// pick a cut strategy of a 4-D einsum member, unless that would drop them all.
func (p *planner) cutEinsums() {
	if p.opts.FullEinsums {
		return
	}
	allowed := map[ir.ValueID][]bool{}
	for _, gr := range p.groups {
		var cut []int // member indices that are 4-D einsums
		for mi, v := range gr.members {
			if p.forced(v) {
				cut = nil
				break
			}
			if a := p.einsumAllowed(v); a != nil {
				allowed[v] = a
				cut = append(cut, mi)
			}
		}
		if len(cut) == 0 {
			continue
		}
		var keep []groupStrategy
		for _, gs := range gr.strats {
			ok := true
			for _, mi := range cut {
				ok = ok && allowed[gr.members[mi]][gs.pick[mi]]
			}
			if ok {
				keep = append(keep, gs)
			}
		}
		if len(keep) > 0 && len(keep) < len(gr.strats) {
			p.cut += len(gr.strats) - len(keep)
			gr.strats = keep
		}
	}
}

// einsumAllowed returns, for a value the cut applies to (a 4-D einsum or an expert einsum),
// which of its candidates the cut keeps; nil for any other value.
func (p *planner) einsumAllowed(v ir.ValueID) []bool {
	d, batch, lead, ok := p.cutLabels(v)
	if !ok {
		return nil
	}
	// takeable[a]: some leading label's size is divisible by axis a.
	var takeable mesh.AxisSet
	for a := range 2 {
		for l, b := range lead {
			if b && p.lm.Shape[a] > 1 && d.Sizes[l]%p.lm.Shape[a] == 0 {
				takeable |= 1 << a
			}
		}
	}
	if takeable == 0 {
		return nil
	}
	out := make([]bool, len(p.cands[v]))
	for k, s := range p.cands[v] {
		// The axes each label is split on, read from the operand specs (every label of
		// an einsum is in some operand; a reduce-scatter's axes are its contracted label's).
		var bad mesh.AxisSet
		for i, labels := range d.Operands {
			for dim, l := range labels {
				if l >= 0 && !batch[l] {
					bad |= s.In[i].Dims[dim]
				}
			}
		}
		out[k] = bad&takeable == 0
	}
	return out
}

// cutLabels classifies the labels of a value the cut applies to: batch labels may take any
// axis; an axis some lead label's size is divisible by splits no label that is not batch.
// ok is false for a value the cut leaves alone.
//
//   - A contraction with a result of rank ≥ 3 and an operand of rank ≥ 4. Its operands of
//     rank ≥ 4 are activations, the others weights (the experts' ehf and efh) or small
//     activations (the gates). Batch labels are the result's labels in every 4-D operand;
//     lead labels the result's labels in every operand. Attention's einsums (every operand
//     4-D) have b and h for both, as before. GShard's expert einsums: egch,ehf→egcf and
//     egcf,efh→gech have batch e, g, c and lead e: on an axis the experts can take,
//     splitting e splits the weights as a split of f or h does, with no collective inside
//     the op (f or the contracted h would need the activation whole on that axis, or
//     leave an all-reduce of the output), so f and h are cut there; g and c stay (data-
//     parallel experts, weights whole, trade an all-to-all for the weights' all-reduce).
//     gsec,gsh→egch has batch g, e, c and lead g, and gsec,gech→gsh batch and lead g:
//     where the groups can go, the contracted labels (a partial result to reduce) and
//     the labels of one operand (the other whole on that axis) are cut. The gradients
//     follow the same rule (the gates' gsec,gsc→gse: batch g, s, e, lead g, s; c is cut),
//     the experts' weight gradients egcf,egch→ehf included: batch and lead e, so on an
//     axis the experts can take g and c (contracted: the data-parallel all-reduce of the
//     weight gradient) are cut too — a trade-off, not a dominance, kept because the
//     measured plans are equal (BENCHMARKS.md). Contractions with no 4-D operand (the
//     gate logits gsh,he→gse, every GPT projection) and 2-D results are not cut.
//
// Convolutions are not cut: a batch-first rule for them (an axis the batch can take splits
// no channel) changed the tiny Wide-ResNet's plan (2×2: 3962 → 4036 µs, +1.9 %), whose
// optimum splits the early convolutions' output channels from a replicated input.
func (p *planner) cutLabels(v ir.ValueID) (d ir.Dims, batch, lead []bool, ok bool) {
	val := p.g.Value(v)
	if val.Op.Def().Category != ir.CatContraction || val.Type.Shape.Rank() < 3 {
		return d, nil, nil, false
	}
	d = p.g.Dims(v)
	if len(d.Operands) < 2 {
		return d, nil, nil, false
	}
	act := false
	for _, op := range d.Operands {
		act = act || len(op) >= 4
	}
	if !act {
		return d, nil, nil, false
	}
	batch = make([]bool, d.NumLabels())
	lead = make([]bool, d.NumLabels())
	for l := range batch {
		batch[l] = has(d.Result, l) && !d.Fixed[l]
		lead[l] = batch[l]
		for _, op := range d.Operands {
			lead[l] = lead[l] && has(op, l)
			if len(op) >= 4 {
				batch[l] = batch[l] && has(op, l)
			}
		}
	}
	return d, batch, lead, true
}

func has(labels []int, l int) bool {
	for _, x := range labels {
		if x == l {
			return true
		}
	}
	return false
}

// The convolution cut (not exact; Options.FullConvs turns it off). A convolution (and its
// two gradients) fixes its spatial dims: it reads and computes them whole. When it splits
// its contracted channels its partial result is finished by an all-reduce or by a
// reduce-scatter onto a result dim; onto a spatial dim (h, w, or the filter gradient's
// kh, kw) that leaves the result split where the ops that read activations in a
// convolutional network — the next convolution, batch norm and pooling, which fix those
// dims too — need it whole, so the split must be undone (an all-to-all or all-gather)
// before them, while a reduce-scatter onto the batch or channel dim moves the same bytes
// over the same axes (a collective's price depends on neither the dim nor the shape),
// leaves as many bytes a device and a layout those readers can take. On a 2-D mesh those
// spatial layouts (RRS1R, S0RS1R, …) are a third of a Wide-ResNet group's strategies and
// their classes half of its edge variables; followers of such a layout (batch norm) can
// only reshard it inside the group. What the cut gives up is a chain of elementwise ops
// run spatially split between two convolutions, where the batch and channel dims cannot
// take the axis. Measured, not proved: docs/DECISIONS.md ("The convolution cut") and
// BENCHMARKS.md give the effect, TestConvCutKeepsPlans the tiny Wide-ResNet's plans.

// convScatterCut reports whether the cut drops a reduce-scatter of op's partial result
// onto result dim dim: op is a convolution or one of its gradients and dim's label is one
// the op fixes (its spatial dims).
func convScatterCut(op ir.Op, d ir.Dims, dim int) bool {
	switch op {
	case ir.OpConv2D, ir.OpConv2DInputGrad, ir.OpConv2DFilterGrad:
		l := d.Result[dim]
		return l >= 0 && d.Fixed[l]
	}
	return false
}
