package codegen

import (
	"slices"

	"github.com/autopar/autopar/ir"
)

// Activation recomputation (Chen et al. 2016; Megatron-LM's full recomputation, Alpa's
// remat per stage). A stage with Stage.Recompute runs its forward as usual — it sends what
// other stages need and accumulates the loss — but keeps none of its activations: when
// the forward block ends, it frees every value of the micro-batch except the stage inputs
// it received (dropActivations), and a value lives during the forward only until its last
// forward use. The backward block starts by running again the forward ops the backward
// needs, directly or through other forward ops (recompute), with no sends and no
// accumulation, then runs the backward as usual. Inputs and params are loaded again where
// the recomputation reads them; constants are filled again.
//
// So between the forward and the backward of a micro-batch the stage holds its received
// inputs only, and at the peak one micro-batch's activations: what the stage DP prices as
// dp.StageCost.ActBytes per micro-batch in flight plus OnceBytes. The recomputed ops run
// the same kernels on the same operands, so a recomputed plan computes bit for bit what
// the plain one does.

// remat is the recomputation of one stage.
type remat struct {
	// need marks the forward ops of the stage that its backward needs.
	need []bool
	// usesF counts each value's operand uses by the stage's forward ops; uses those by the
	// recomputed forward ops and the backward ops.
	usesF, uses []int
	// backward is set once the backward block is being emitted.
	backward bool
}

func newRemat(em *stageEm) *remat {
	g := em.l.g
	n := len(g.Values)
	r := &remat{need: make([]bool, n), usesF: make([]int, n), uses: make([]int, n)}
	fwd := make([]bool, n)
	for _, v := range em.opsF {
		fwd[v] = true
	}
	for _, v := range em.opsB {
		for _, a := range g.Value(v).Args {
			r.need[a] = r.need[a] || fwd[a]
			r.uses[a]++
		}
	}
	for _, v := range slices.Backward(em.opsF) {
		for _, a := range g.Value(v).Args {
			r.usesF[a]++
			if r.need[v] {
				r.need[a] = r.need[a] || fwd[a]
				r.uses[a]++
			}
		}
	}
	return r
}

// usesOf is how many operand uses a value the stage computes has left after it is made,
// in the block being emitted.
func (r *remat) usesOf(v ir.ValueID) int {
	if r.backward {
		return r.uses[v]
	}
	return r.usesF[v]
}

// dropActivations ends a recomputing stage's forward block: every value of the
// micro-batch is freed but the stage inputs the recomputation or the backward reads, whose
// uses are counted anew.
func (em *stageEm) dropActivations() {
	var keys []key
	for k := range em.have {
		if k.mb >= 0 {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, func(a, b key) int { return int(a.v) - int(b.v) })
	for _, k := range keys {
		if n := em.remat.uses[k.v]; em.stageInput(k.v) && n > 0 {
			em.left[k] = n
			continue
		}
		em.release(k)
	}
}

// recompute starts a recomputing stage's backward block: the forward ops the backward
// needs run again, in graph order.
func (em *stageEm) recompute() {
	em.remat.backward = true
	em.redo = true
	for _, v := range em.opsF {
		if em.remat.need[v] {
			em.compute(v, 0)
		}
	}
	em.redo = false
}
