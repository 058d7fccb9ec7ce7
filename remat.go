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
// into them; in flight stay the kept values. Once, at the backward's peak: recomputing
// the whole stage, the plain stage's activations of one micro-batch (the sharding pass's
// liveness peak); layer by layer, no more than that, and no more than the backward's own
// temporaries (that peak less the forward values the backward reads, under their
// layouts) and the largest layer's recomputed values.
func (r *stageRemat) costs(g *ir.Graph, res *sharding.Result, plain dp.StageCost) []dp.StageCost {
	bytes := func(i int) float64 {
		v := &g.Values[i]
		b, err := res.Mesh.LocalBytes(v.Type.Shape, v.Type.DType.Size(), res.Specs[i])
		if err != nil {
			return 0
		}
		return float64(b)
	}
	var forward float64 // what the plain backward reads of the forward
	for i := range g.Values {
		if r.whole.redo[i] {
			forward += bytes(i)
		}
	}
	temps := max(0, plain.ActBytes-forward)
	var out []dp.StageCost
	for _, w := range []*rematWay{r.whole, r.layers} {
		extra, kept := 0.0, 0.0
		segs := map[int]float64{}
		for i, s := range res.Strategies {
			if w.redo[i] {
				extra += s.Compute + s.Comm
				segs[w.seg[i]] += bytes(i)
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
		var largest float64
		for _, b := range segs {
			largest = max(largest, b)
		}
		c := plain // what recomputation does not change (weights, per-step work) carries over
		c.Time += extra
		c.ActBytes, c.OnceBytes, c.Recompute, c.Checkpoints = kept, plain.ActBytes, true, w == r.layers
		if w == r.layers {
			c.OnceBytes = min(plain.ActBytes, temps+largest)
		}
		out = append(out, c)
	}
	return out
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
