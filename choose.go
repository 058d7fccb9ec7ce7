package autopar

import (
	"cmp"
	"context"
	"math"
	"slices"

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

// movedPipelineWins prices s's first plans under its base and its moved layering, its seed
// (attempt.seedPlan) and its host pipeline (hostPipeline), and says whether the moved
// layering's faster one beats the base layering's by movedMargin, or only it has one. A
// host pipeline is priced only as far as it can change that answer (hostPipeline's limit):
// the seeds are cheap, one-layer stages, the host pipeline's stages several layers each.
func movedPipelineWins(s *Compilation) bool {
	at := func(lay *passes.Layering) *attempt {
		c := *s
		c.Layering, c.moved = lay, nil
		a, err := setUp(&c)
		if err != nil {
			return nil
		}
		return a
	}
	base, moved := at(s.Layering), at(s.moved)
	if base == nil || moved == nil {
		return false
	}
	seed := func(a *attempt) float64 {
		if res := a.seed(s.ctx); res != nil {
			return res.Time
		}
		return math.Inf(1)
	}
	b, m := seed(base), seed(moved)
	// The moved host pipeline matters only where it beats the base seed by the margin,
	// the base one only where the moved layering wins without it and it may bring the
	// base layering's best within the margin of the moved layering's.
	m = min(m, moved.hostPipeline(s.ctx, b*(1-movedMargin)))
	if m < b*(1-movedMargin) {
		b = min(b, base.hostPipeline(s.ctx, m/(1-movedMargin)))
	}
	if layeringTrace != nil {
		layeringTrace(s.Microbatches, b, m)
	}
	return s.ctx.Err() == nil && m < b*(1-movedMargin)
}

// hostPipeline is the step time of the count's pipeline of one stage a host, L/H layers
// each, every stage tensor-parallel over its host (logical mesh 1 × devices a host), its
// stages solved by their own ILPs as exactly re-costs a plan: a pipeline that puts the
// param's layer and the reader's on different hosts, whose link makes the part's bytes
// dear. It is +Inf where the cluster has one host, the hosts do not divide the layers or
// the micro-batches, the pipeline does not fit, or it cannot beat limit: the step is
// Σ t + (B − 1)·max t + the step's part (dp's search.times), each stage's t its own time
// a micro-batch plus its receives, so the same sum over floors of the stages' t is a floor
// of it. The receives are priced without an ILP (oracle.Receives; a stage holding a whole
// host receives from its neighbours across hosts) and are the first floors; each stage's
// ILP, solved in the order of their receives, the dearest first, adds its time (the least
// of its ways, recomputing or not), and the pricing stops where the floor reaches limit.
func (a *attempt) hostPipeline(ctx context.Context, limit float64) float64 {
	L, c, b := a.s.Layering.L, a.s.Cluster, float64(a.s.Microbatches)
	h, per := c.Hosts, c.DevicesPerHost
	if h < 2 || L%h != 0 || a.s.Microbatches < h {
		return math.Inf(1)
	}
	p := &dp.Result{}
	lo := map[int]float64{} // a floor of each stage's t: its receives, then its ILP's time too
	floor := func() float64 {
		sum, slowest := 0.0, 0.0
		for _, t := range lo {
			sum, slowest = sum+t, max(slowest, t)
		}
		return sum + (b-1)*slowest
	}
	for k := 0; k < L; k += L / h {
		st := dp.Stage{Start: k, End: k + L/h, Submesh: mesh.Submesh{Hosts: 1, Devices: per}, Logical: mesh.LogicalShape{1, per}}
		p.Stages = append(p.Stages, st)
		r := a.o.Receives(st.Start, st.End, st.Submesh)
		lo[k] = r.Before.Cross + r.After.Cross + r.Far // its neighbours hold other hosts
	}
	if floor() >= limit {
		return math.Inf(1)
	}
	order := slices.Clone(p.Stages)
	slices.SortStableFunc(order, func(x, y dp.Stage) int { return cmp.Compare(lo[y.Start], lo[x.Start]) })
	for _, st := range order {
		sol := a.o.solve(st.Start, st.End, st.Submesh, st.Logical)
		if ctx.Err() != nil || !sol.ok {
			return math.Inf(1)
		}
		t := sol.cost.Time
		for _, r := range sol.remats {
			t = min(t, r.Time)
		}
		if lo[st.Start] += t; floor() >= limit {
			return math.Inf(1)
		}
	}
	res, err := a.o.recost(ctx, L, a.dc, quietOf(a.do), p, a.progress)
	if err != nil || ctx.Err() != nil {
		return math.Inf(1)
	}
	return res.Time
}

// layeringTrace, set by benchmarks only (-count-trace), hears chooseLayering's first
// plans: the count and the base and moved layerings' faster steps (+Inf: none, or not
// priced as it could not change the choice).
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
