package autopar

import (
	"fmt"

	"github.com/autopar/autopar/dp"
	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/passes/sharding"
)

// Activation recomputation as a choice of the search. A recomputing stage (codegen's
// Stage.Recompute) keeps from the forward of a micro-batch to its backward only the
// activations it receives from earlier stages, and runs again, at the start of the
// backward, the forward ops its backward needs. The oracle prices both ways from the one
// sharding solve of the stage:
//
//   - time: the plain stage's, plus the compute and collectives of the recomputed ops
//     (their strategies' cost and the resharding into them);
//   - memory: the plain stage holds ActBytes (its whole activations) per micro-batch in
//     flight; the recomputing one holds its received inputs per micro-batch in flight
//     (ActBytes) and, once, the activations of the micro-batch whose backward runs
//     (OnceBytes: the plain ActBytes).
//
// With RematAuto the DP takes, per stage, the faster of the two that fits: recomputation
// only where memory forces it, as its time is never less.

// The values Options.Remat takes.
const (
	RematAuto = "auto" // the search decides per stage
	RematNone = "none" // no stage recomputes
	RematFull = "full" // every stage recomputes (Megatron-LM's full recomputation)
)

// checkRemat refuses a recomputation mode other than auto, none and full.
func checkRemat(mode string) error {
	switch mode {
	case RematAuto, RematNone, RematFull:
		return nil
	}
	return fmt.Errorf("compile: unknown recomputation %q, expected auto, none or full", mode)
}

// stageRemat is what a stage's recomputation needs of its subgraph, independent of the
// mesh: which of its ops run again and which of its inputs stay in flight.
type stageRemat struct {
	redo []bool // per value of the stage graph: a forward op the backward needs
	keep []bool // per value: an input from another stage the forward reads and the recomputation or backward reads
}

// newStageRemat classifies the stage graph's values by the step's: forward ops (the loss
// depends on them) and the others, which read forward values only in the backward (the
// update reads none that depend on the data; codegen refuses a step where it does).
func newStageRemat(step *ir.Graph, fwd []bool, g *ir.Graph) *stageRemat {
	n := len(g.Values)
	isFwd, isBwd, input := make([]bool, n), make([]bool, n), make([]bool, n)
	for i := range g.Values {
		v := &g.Values[i]
		id, ok := step.Lookup(v.Name)
		switch {
		case !ok:
		case v.Op == ir.OpInput && step.Value(id).Op != ir.OpInput:
			input[i] = fwd[id] // arrives from another stage
		case v.Op.IsLeaf() || step.Value(id).Op != v.Op:
		case fwd[id]:
			isFwd[i] = true
		default:
			isBwd[i] = true
		}
	}
	r := &stageRemat{redo: make([]bool, n), keep: make([]bool, n)}
	readF, readR := make([]bool, n), make([]bool, n)
	for i := n - 1; i >= 0; i-- {
		args := g.Values[i].Args
		for _, a := range args {
			if isBwd[i] || r.redo[i] {
				r.redo[a] = r.redo[a] || isFwd[a]
				readR[a] = true
			}
			readF[a] = readF[a] || isFwd[i]
		}
	}
	for i := range n {
		r.keep[i] = input[i] && readF[i] && readR[i]
	}
	return r
}

// rematCost prices the stage recomputing, from its plain cost and sharding.
func (r *stageRemat) rematCost(g *ir.Graph, res *sharding.Result, plain dp.StageCost) dp.StageCost {
	extra := 0.0
	for i, s := range res.Strategies {
		if r.redo[i] {
			extra += s.Compute + s.Comm
		}
	}
	for _, c := range res.Collectives {
		if c.Consumer != ir.NoValue && c.Slot >= 0 && r.redo[c.Consumer] {
			extra += c.Time
		}
	}
	var kept int64
	for i := range g.Values {
		if !r.keep[i] {
			continue
		}
		v := &g.Values[i]
		if b, err := res.Mesh.LocalBytes(v.Type.Shape, v.Type.DType.Size(), res.Specs[i]); err == nil {
			kept += b
		}
	}
	c := plain // what recomputation does not change (weights, per-step work) carries over
	c.Time += extra
	c.ActBytes, c.OnceBytes, c.Recompute = float64(kept), plain.ActBytes, true
	return c
}

// forwardValues marks the step's forward values: those the loss depends on.
func forwardValues(step *ir.Graph) []bool {
	fwd := make([]bool, len(step.Values))
	if len(step.Outputs) == 0 {
		return fwd
	}
	fwd[step.Outputs[0].Value] = true
	for i := len(step.Values) - 1; i >= 0; i-- {
		for _, a := range step.Values[i].Args {
			fwd[a] = fwd[a] || fwd[i]
		}
	}
	return fwd
}
