package codegen

import (
	"slices"

	"github.com/autopar/autopar/ir"
)

// Activation recomputation (Chen et al. 2016; Megatron-LM's full recomputation, Alpa's
// remat per stage). A stage with Stage.Recompute runs its forward as usual — it sends what
// other stages need and accumulates the loss — but keeps few of its activations: a value
// lives during the forward only until its last forward use, and when the forward block
// ends every value of the micro-batch is freed except the stage inputs it received and
// the checkpoints (dropActivations). The backward block runs the backward ops as before,
// but before each it recomputes the segment of any forward value it needs that is gone
// (recomputeFor): the forward ops of that segment the backward needs, with no sends and
// no accumulation. Inputs and params are loaded again where the recomputation reads them;
// constants are filled again.
//
// Segments are Stage.Segment (a stage's layers, say); a value of one segment that an op of
// another reads is a checkpoint, kept from the forward and not recomputed. With one
// segment the stage holds between its forward and backward its received inputs only, and
// at the peak one micro-batch's activations; with a segment per layer, its inputs and the
// layers' inputs, and one layer's activations at a time. The recomputed ops run the same
// kernels on the same operands, so a recomputed plan computes bit for bit what the plain
// one does.

// remat is the recomputation of one stage.
type remat struct {
	seg []int // per value: the segment of a forward op of the stage
	// redo marks the forward ops of the stage that the backward recomputes; keep the
	// checkpoints, forward ops the forward keeps for the backward.
	redo, keep []bool
	// usesF counts each value's operand uses by the stage's forward ops; uses those by the
	// recomputed forward ops and the backward ops.
	usesF, uses []int
	done        map[int]bool // segments recomputed in the backward block
	// backward is set once the backward block is being emitted.
	backward bool
}

func newRemat(em *stageEm) *remat {
	g := em.l.g
	n := len(g.Values)
	r := &remat{seg: make([]int, n), redo: make([]bool, n), keep: make([]bool, n),
		usesF: make([]int, n), uses: make([]int, n), done: map[int]bool{}}
	fwd := make([]bool, n)
	for _, v := range em.opsF {
		fwd[v] = true
		r.seg[v] = em.st.Segment[v]
	}
	need := make([]bool, n)
	for _, v := range em.opsB {
		for _, a := range g.Value(v).Args {
			need[a] = need[a] || fwd[a]
			r.uses[a]++
		}
	}
	// Every consumer of a forward op comes after it, so walking backwards settles whether
	// a value is read across segments (a checkpoint) before its own turn.
	for _, v := range slices.Backward(em.opsF) {
		r.redo[v] = need[v] && !r.keep[v]
		for _, a := range g.Value(v).Args {
			r.usesF[a]++
			if !r.redo[v] {
				continue
			}
			r.uses[a]++
			if fwd[a] {
				need[a] = true
				r.keep[a] = r.keep[a] || r.seg[a] != r.seg[v]
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

// keeps reports whether k, just made, is a checkpoint of the forward, kept whatever its
// forward uses until the forward ends.
func (r *remat) keeps(k key, redo bool) bool {
	return !r.backward && !redo && k.mb >= 0 && r.keep[k.v]
}

// dropActivations ends a recomputing stage's forward block: every value of the
// micro-batch is freed but the stage inputs and checkpoints the recomputation or the
// backward reads, whose uses are counted anew.
func (em *stageEm) dropActivations() {
	var keys []key
	for k := range em.have {
		if k.mb >= 0 {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, func(a, b key) int { return int(a.v) - int(b.v) })
	r := em.remat
	for _, k := range keys {
		if n := r.uses[k.v]; (em.stageInput(k.v) || r.keep[k.v]) && n > 0 {
			em.left[k] = n
			continue
		}
		em.release(k)
	}
}

// recomputeFor recomputes, before backward op v runs, the segment of every forward value
// it reads that the backward recomputes, unless done already.
func (em *stageEm) recomputeFor(v ir.ValueID) {
	r := em.remat
	for _, a := range em.l.g.Value(v).Args {
		if s := r.seg[a]; r.redo[a] && !r.done[s] {
			em.recomputeSegment(s)
		}
	}
}

// recomputeSegment runs again the forward ops of segment s the backward needs, in graph
// order.
func (em *stageEm) recomputeSegment(s int) {
	r := em.remat
	r.done[s] = true
	em.redo = true
	for _, v := range em.opsF {
		if r.redo[v] && r.seg[v] == s {
			em.compute(v, 0)
		}
	}
	em.redo = false
}
