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
// Replicating an axis stays allowed (the tiny models' plans replicate attention).

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

// einsumAllowed returns, for a 4-D einsum, which of its candidates the cut keeps; nil for
// any other value.
func (p *planner) einsumAllowed(v ir.ValueID) []bool {
	val := p.g.Value(v)
	if val.Op.Def().Category != ir.CatContraction || val.Type.Shape.Rank() < 4 {
		return nil
	}
	d := p.g.Dims(v)
	if len(d.Operands) < 2 {
		return nil
	}
	for _, op := range d.Operands {
		if len(op) < 4 {
			return nil
		}
	}
	batch := make([]bool, d.NumLabels())
	for l := range batch {
		batch[l] = has(d.Result, l) && !d.Fixed[l]
		for _, op := range d.Operands {
			batch[l] = batch[l] && has(op, l)
		}
	}
	// takeable[a]: some batch label's size is divisible by axis a.
	var takeable mesh.AxisSet
	for a := range 2 {
		for l, b := range batch {
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

func has(labels []int, l int) bool {
	for _, x := range labels {
		if x == l {
			return true
		}
	}
	return false
}
