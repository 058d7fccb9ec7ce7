package autopar

import (
	"fmt"

	"github.com/autopar/autopar/dp"
	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/passes/sharding"
)

// Activation recomputation as a choice of the search. A recomputing stage (codegen's
// Stage.Recompute) keeps from the forward of a micro-batch to its backward only the
// activations it receives from earlier stages — and, recomputing layer by layer
// (Stage.Segment), each layer's input — and runs again in the backward the forward ops
// its backward needs. The oracle prices each way from the one sharding solve of the stage
// (stageRemat.costs): more time by the recomputed ops, the kept values per micro-batch in
// flight (ActBytes), and once what the micro-batch under backward recomputes (OnceBytes).
//
// With RematAuto the DP takes, per stage, the fastest of the three that fits:
// recomputation only where memory forces it, as its time is never less.

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
// mesh, both ways codegen runs it: the whole stage as one segment, and layer by layer.
type stageRemat struct {
	whole, layers *rematWay
}

// rematWay is one way to recompute a stage: which of its ops run again, which values
// stay in flight, and the segment of each.
type rematWay struct {
	redo []bool // per value of the stage graph: a forward op the backward recomputes
	kept []bool // per value: an input from another stage or a checkpoint held for the backward
	seg  []int  // per value: its segment (layer)
	// marks are the way for the sharding pass's memory model: the budget of a stage that
	// recomputes this way is checked against its recomputing peak.
	marks *sharding.Recompute
}

// newStageRemat classifies the stage graph's values by the step's: forward ops (the loss
// depends on them) and the others, which read forward values only in the backward (the
// update reads none that depend on the data; codegen refuses a step where it does).
// layerOf gives each step value's layer.
func newStageRemat(step *ir.Graph, fwd []bool, layerOf []int, g *ir.Graph) *stageRemat {
	n := len(g.Values)
	isFwd, isBwd, input := make([]bool, n), make([]bool, n), make([]bool, n)
	layers, one := make([]int, n), make([]int, n)
	for i := range g.Values {
		v := &g.Values[i]
		id, ok := step.Lookup(v.Name)
		switch {
		case !ok:
		case v.Op == ir.OpInput && step.Value(id).Op != ir.OpInput:
			input[i] = fwd[id] // arrives from another stage
		case v.Op.IsLeaf() || step.Value(id).Op != v.Op:
		case fwd[id]:
			isFwd[i], layers[i] = true, layerOf[id]
		default:
			isBwd[i] = true
		}
	}
	return &stageRemat{whole: newRematWay(g, isFwd, isBwd, input, one), layers: newRematWay(g, isFwd, isBwd, input, layers)}
}

// newRematWay is codegen's recomputation (codegen/remat.go) on the stage graph: a forward
// value the backward or a recomputed op reads is recomputed, unless a recomputed op of
// another segment reads it (a checkpoint, kept).
func newRematWay(g *ir.Graph, isFwd, isBwd, input []bool, seg []int) *rematWay {
	n := len(g.Values)
	w := &rematWay{redo: make([]bool, n), kept: make([]bool, n), seg: seg}
	w.marks = &sharding.Recompute{Redo: w.redo, Backward: isBwd, Segment: seg}
	need, readF, readR := make([]bool, n), make([]bool, n), make([]bool, n)
	for i := n - 1; i >= 0; i-- {
		w.redo[i] = isFwd[i] && need[i] && !w.kept[i]
		runs := isBwd[i] || w.redo[i]
		for _, a := range g.Values[i].Args {
			readF[a] = readF[a] || isFwd[i]
			if !runs {
				continue
			}
			readR[a] = true
			if isFwd[a] {
				need[a] = true
				w.kept[a] = w.kept[a] || (w.redo[i] && seg[a] != seg[i])
			}
		}
	}
	for i := range n {
		w.kept[i] = w.kept[i] || input[i] && readF[i] && readR[i]
	}
	return w
}

// costs prices the stage recomputing, whole and layer by layer, from its plain cost and
// sharding. Time grows by the recomputed ops' compute and collectives and the resharding
// into them; in flight stay the kept values (ActBytes). Once, at the backward's peak, the
// rest of the recomputing stage's peak for one micro-batch, as the sharding pass's memory
// model holds it (sharding.Recompute: one segment's activations at a time): OnceBytes is
// that peak less the weights and the kept values, so that Memory(1) is the peak the
// stage's ILP checks against the budget when it recomputes this way.
func (r *stageRemat) costs(g *ir.Graph, res *sharding.Result, plain dp.StageCost) ([]dp.StageCost, error) {
	bytes := func(i int) float64 {
		v := &g.Values[i]
		b, err := res.Mesh.LocalBytes(v.Type.Shape, v.Type.DType.Size(), res.Specs[i])
		if err != nil {
			return 0
		}
		return float64(b)
	}
	var out []dp.StageCost
	for _, w := range []*rematWay{r.whole, r.layers} {
		extra, kept := 0.0, 0.0
		for i, s := range res.Strategies {
			if w.redo[i] {
				extra += s.Compute + s.Comm
			}
			if w.kept[i] {
				kept += bytes(i)
			}
		}
		for _, c := range res.Collectives {
			if c.Consumer != ir.NoValue && c.Slot >= 0 && w.redo[c.Consumer] {
				extra += c.Time
			}
		}
		peak, err := res.PeakWith(g, w.marks)
		if err != nil {
			return nil, err
		}
		c := plain // what recomputation does not change (weights, per-step work) carries over
		c.Time += extra
		c.ActBytes, c.Recompute, c.Checkpoints = kept, true, w == r.layers
		c.OnceBytes = max(0, float64(peak)-plain.WeightBytes-kept)
		out = append(out, c)
	}
	return out, nil
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
