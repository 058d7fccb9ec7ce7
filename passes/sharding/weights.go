package sharding

import (
	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/mesh"
)

// The objective weighs a stage's costs as a step of B micro-batches runs them: B·t + u,
// where t is the per-micro-batch part (forward and backward) and u the once-per-step part
// (the update's ops and collectives, the deferred collectives of accumulated gradients,
// the reshardings of params and state and into the update), as codegen runs them. With
// B = 1 (or without the step's marks) every weight is 1 and the objective is t + u.
//
// B·t + u is the step time of a one-stage plan, and of a pipeline's bottleneck stage up to
// the other stages' fill and drain (Σ t + (B−1)·max t + u₀): the stage the (B−1)·max term
// takes is weighed B on t, as here. A stage that is not the bottleneck weighs t less in
// the pipeline's step (once, in Σ t); the ILP does not know its stage's position, so it
// weighs every stage as if it were the bottleneck, which is exact in the cases that
// decide whether data parallelism pays (a one-stage plan, the slowest stage).
//
// Weights are per value. A value's own cost: compute and collectives of an update op
// weigh 1; an accumulated value's collectives weigh 1 and its compute B; anything else B.
// A value's reshardings (priced once per (value, layout), as codegen keeps every layout it
// makes) weigh 1 when every use of the value is once per step — a param or state (the
// prologue's), an update's new value (slot −1), a value read only by update ops — and B
// otherwise: a layout shared by a per-micro-batch use is made per micro-batch.

// weigh sets the per-value resharding weights and the micro-batch weight.
func (p *planner) weigh() {
	n := len(p.g.Values)
	p.wB = 1
	p.wReshard = make([]float64, n)
	for i := range p.wReshard {
		p.wReshard[i] = 1
	}
	if p.opts.Microbatches <= 1 || p.opts.Update == nil {
		return
	}
	p.wB = float64(p.opts.Microbatches)
	perMB := make([]bool, n)
	for id := range p.g.Values {
		if p.opts.Update[id] {
			continue
		}
		for _, a := range p.g.Values[id].Args {
			perMB[a] = true
		}
	}
	for id := range p.g.Values {
		if op := p.g.Values[id].Op; perMB[id] && op != ir.OpParam && op != ir.OpState {
			p.wReshard[id] = p.wB
		}
	}
}

// ownCost is strategy s of value v's compute and collectives as the objective weighs them.
func (p *planner) ownCost(v ir.ValueID, s *Strategy) float64 {
	switch {
	case p.wB == 1:
		return s.Compute + s.Comm
	case p.opts.Update[v]:
		return s.Compute + s.Comm
	case p.opts.Accumulated != nil && p.opts.Accumulated[v]:
		return p.wB*s.Compute + s.Comm
	}
	return p.wB * (s.Compute + s.Comm)
}

// reshardCost is the time of resharding value v from one layout into another, weighed.
func (p *planner) reshardCost(v ir.ValueID, from, to mesh.Spec) float64 {
	return p.wReshard[v] * p.reshard(v, from, to).Time
}
