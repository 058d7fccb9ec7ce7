package autopar

import (
	"context"

	"github.com/autopar/autopar/dp"
	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/mesh"
	"github.com/autopar/autopar/passes"
)

// movedMargin is how much faster the moved layering's seed must be for the search to keep
// it (chooseLayering): a seed within it of the base layering's says the part's stage does
// not decide the pipeline's bottleneck, and the base layering, Alpa's rule, is kept.
const movedMargin = 0.01

// layeringChoice, set by tests and benchmarks only, replaces chooseLayering's answer
// (moved: keep the moved layering) by its own.
var layeringChoice func(moved bool) bool

// chooseLayering picks, before the search, each compilation's layering between the two
// placements of the params' adjoint parts the cluster phase made (Compilation.moved): the
// base one, every part with its param, and the moved one, a part with the reader whose rule
// made it where fewer bytes cross (passes.ClusterLayerings). Which is better is a transfer
// against a stage's balance, which only a plan prices: a tied embedding's output-projection
// part in the first stage pulls the logits' adjoint across the pipeline every micro-batch
// (MoE-70B/64: 0.38 of the first stage's 0.54 s), in the last stage it adds a large einsum
// to the stage that already runs the projection (GPT-2.6B/8 on one host: a slower plan).
// The price is the seed's (attempt.seedPlan, Megatron's pipeline of one layer a stage), at
// the largest count whose layerings differ, under each layering: its stages are the
// pipeline that separates the param's layer from the reader's layer most, and its middle
// stages are the same graphs under both, solved once (the oracles share solutions by
// graph hash), so the second layering costs two stage ILPs. The moved layering is kept
// where its seed is faster by movedMargin (or only it fits); then every count takes its
// moved layering. The choice is one problem for both searches: fast and exhaustive price
// the same seeds, and each then searches the layering chosen (not both: where one-stage
// plans win, the moved layering's cheaper pipelines only lengthen the climb to refute
// them, GPT-15B/32 3× its search for the same plan; docs/DECISIONS.md, "Round twelve,
// layering"). A compile from a saved plan (Options.From) takes the layering the plan
// was made with.
func chooseLayering(ss []*Compilation) {
	var last *Compilation
	for _, s := range ss {
		if s.moved != nil && (last == nil || s.Microbatches > last.Microbatches) {
			last = s
		}
	}
	if last == nil {
		return
	}
	var moved bool
	if p := last.Options.From; p != nil {
		moved = madeWith(p, last.Step, last.Layering, last.moved)
	} else {
		moved = movedPipelineWins(last)
	}
	if layeringChoice != nil {
		moved = layeringChoice(moved)
	}
	for _, s := range ss {
		if moved && s.moved != nil {
			s.Layering = s.moved
		}
		s.moved = nil
	}
}

// movedPipelineWins prices s's first plans (its seed, attempt.seedPlan, and its host
// pipeline, hostPipeline) under its base and its moved layering and says whether the
// moved layering's faster one beats the base layering's by movedMargin, or only it fits.
func movedPipelineWins(s *Compilation) bool {
	price := func(lay *passes.Layering) float64 {
		c := *s
		c.Layering, c.moved = lay, nil
		a, err := setUp(&c)
		if err != nil {
			return -1
		}
		t := a.hostPipeline(c.ctx)
		if a.seedPlan(c.ctx); a.held != nil && (t < 0 || a.held.Predicted.StepTime < t) {
			t = a.held.Predicted.StepTime
		}
		return t
	}
	base := price(s.Layering)
	if s.ctx.Err() != nil {
		return false
	}
	moved := price(s.moved)
	if layeringTrace != nil {
		layeringTrace(s.Microbatches, base, moved)
	}
	switch {
	case moved < 0:
		return false
	case base < 0:
		return true
	}
	return moved < base*(1-movedMargin)
}

// hostPipeline is the step time of the count's pipeline of one stage a host, L/H layers
// each, every stage tensor-parallel over its host (logical mesh 1 × devices a host), its
// stages solved by their own ILPs as exactly re-costs a plan; −1 where the cluster has
// one host, the hosts do not divide the layers or the micro-batches, or the pipeline does
// not fit.
func (a *attempt) hostPipeline(ctx context.Context) float64 {
	L, c := a.s.Layering.L, a.s.Cluster
	h, per := c.Hosts, c.DevicesPerHost
	if h < 2 || L%h != 0 || a.s.Microbatches < h {
		return -1
	}
	p := &dp.Result{}
	for k := 0; k < L; k += L / h {
		p.Stages = append(p.Stages, dp.Stage{Start: k, End: k + L/h, Submesh: mesh.Submesh{Hosts: 1, Devices: per}, Logical: mesh.LogicalShape{1, per}})
	}
	res, err := a.o.recost(ctx, L, a.dc, quietOf(a.do), p, a.progress)
	if err != nil || ctx.Err() != nil {
		return -1
	}
	return res.Time
}

// layeringTrace, set by benchmarks only (-count-trace), hears chooseLayering's host pipelines: the
// count and the base and moved layerings' seed steps (−1: none).
var layeringTrace func(microbatches int, base, moved float64)

// madeWith says whether saved plan p was made with the moved layering: whether its values
// sit in moved's layers where base and moved differ.
func madeWith(p *Plan, step *ir.Graph, base, moved *passes.Layering) bool {
	layer := map[string]int{}
	for _, st := range p.Stages {
		for _, v := range st.Values {
			layer[v.Name] = v.Layer
		}
	}
	for i := range step.Values {
		if base.Of[i] == moved.Of[i] {
			continue
		}
		if l, ok := layer[step.Values[i].Name]; ok {
			return l == moved.Of[i]
		}
	}
	return false
}
