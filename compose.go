package autopar

import (
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/autopar/autopar/dp"
	"github.com/autopar/autopar/ilp"
	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/mesh"
	"github.com/autopar/autopar/passes/sharding"
)

// The fast search prices a layer range without solving it. Each layer is solved alone,
// once per distinct structure (the oracle's structural hash) and logical mesh: its
// sharding ILP treats a value arriving from another layer as an input leaf whose layout
// the ILP picks freely, and pays the resharding from that layout to each consumer's need.
// A range [a, b) is then priced as the sum of its layers' solutions, corrected on every
// edge that crosses between two layers of the range: the consumer's layer paid
// reshard(leaf layout → need), the range pays reshard(producer's layout → need).
//
// Exactness. The range ILP's objective is a sum over its layers of each layer's own node
// and edge costs, edges charged to the consumer's layer. Restricting any range plan to
// layer k, with each incoming leaf laid out as its producer lays it out, is a plan of
// layer k's ILP of the same cost — provided both ILPs group the layer's ops alike, which
// fails where a follower op (ir.OpDef.Follower) reads a value across the boundary: the
// range merges it into its producer's node, the layer cannot. Without such edges,
// Σ_k OPT(layer k) ≤ OPT(range); and when the layers' optimal solutions agree on every
// crossing edge (every correction is zero) and no param, state, input or constant is read
// by two layers of the range (each layer would pick its own layout of it, and pay its own
// copy of a constant), the composed plan is a plan of the range of cost Σ_k OPT(layer k):
// the price is exact. composedCost.exact says so; TestComposeExact checks it against the
// range ILP. Otherwise the price is that of a plan of the range (up to those merges), an
// estimate; the search only trusts it to choose, and exactly (compile.go) re-prices what it
// chose with range ILPs and bounds the gap. TestFastSearchMatchesExhaustive measures it on
// whole compiles.
//
// Memory. A range holds the sum of its layers' weights (exact: every param belongs to the
// layers that read it) and, as activations, the sum of each layer's own peak above its
// weights: an upper bound, since each layer's peak also counts its transients and the
// boundary tensors it holds as graph outputs. When the fastest composition does not fit
// the device memory, memory-lean solutions of its layers (the layer's ILP under smaller
// budgets, a Pareto set of (time, memory)) are solved on demand and the composition is
// chosen by a Lagrangian chain DP: minimise time + λ·memory, λ raised until the range fits.
// Every point is a real plan of its layer at its own time and peak: under a budget below
// the layer's least footprint, the plan of that footprint the min-peak ILP found
// (sharding.MemoryError.Plan), not the fastest plan of that footprint, so such a point may
// be slower than one of its memory could be (docs/DECISIONS.md, "Lean points from the
// min-peak plan").
//
// The DP then picks stages from these prices, and the chosen stages are solved exactly
// (one range ILP each, shared by identical stages) and re-costed: the plan's prices are
// always the range ILP's.

// layerInfo is what composition needs of one layer of the step, whatever the mesh.
type layerInfo struct {
	sg    *stageGraph
	cross []crossEdge // edges into this layer from another layer's op
	// leaves are the values the layer's graph holds but another layer (or none) computes —
	// params, states, inputs, constants — by step ValueID: two layers of a range that share
	// one make the composition inexact.
	leaves []ir.ValueID
	mem    *layerMem // the bytes memFloor reads (bound.go), made on first use
	// convs: the layer holds a convolution (a Wide-ResNet block): on a two-dimensional
	// mesh its lean points are the leanest budget's only (convLeanFractions)
	convs bool
}

// crossEdge is one use, in the consumer layer, of a value produced by an op of another
// layer.
type crossEdge struct {
	from      int        // producer's layer
	prod      ir.ValueID // the producer in the producer layer's graph
	leaf      ir.ValueID // the input leaf standing for it in this layer's graph
	use       ir.ValueID // the consumer in this layer's graph
	slot      int
	shape     []int
	elemBytes int
	// follower: the consumer may be merged into its operand's node, so the range's ILP
	// and this layer's group it differently (ir.OpDef.Follower)
	follower bool
}

// layerPoint is one solution of one layer on one logical mesh.
type layerPoint struct {
	res     *sharding.Result // nil: pruned (see pruneFactor); then time is a lower bound
	time    float64          // per micro-batch (dp.StageCost.Time)
	step    float64          // once per step: gradient sync and update (dp.StageCost.Step)
	weights float64
	act     float64
	remats  []dp.StageCost // the layer recomputing: whole, layer by layer (remat.go)
}

func (p layerPoint) memory() float64 { return p.weights + p.act }

// total is the point's time per micro-batch, b times, and per step, what the chain DP
// minimises as the layers' ILPs do (B·t + u, sharding/weights.go): a range's gradient sync
// and update are its layers' own, added up.
func (p layerPoint) total(b float64) float64 { return b*p.time + p.step }

// weight is B as the ILP of a range starting at layer start weighs a micro-batch's time
// (oracle.weightOf; 1 when unweighted).
func (o *oracle) weight(start int) float64 { return float64(max(o.weightOf(start), 1)) }

// composedCost is the price of a range from its layers' points.
type composedCost struct {
	cost  dp.StageCost
	ok    bool
	exact bool
	// points are the layers' points the composition chose (restrict.go pins a range to them).
	points []layerPoint
}

type rangeKey struct {
	start, end int
	sub        mesh.Submesh
	logical    mesh.LogicalShape
}

// stageKey is the range and mesh of a stage the DP chose.
func stageKey(st dp.Stage) rangeKey { return rangeKey{st.Start, st.End, st.Submesh, st.Logical} }

// layerInfos builds the per-layer boundary information once.
func (o *oracle) layerInfos() []*layerInfo {
	if o.infos != nil {
		return o.infos
	}
	o.infos = make([]*layerInfo, o.lay.L)
	local := make([]map[ir.ValueID]ir.ValueID, o.lay.L) // step value → its position in layer k's graph
	for k := range o.lay.L {
		sg, err := o.stage(k, k+1)
		if err != nil {
			o.note(err)
			return nil
		}
		o.infos[k] = &layerInfo{sg: sg, convs: holdsConv(sg.g)}
		local[k] = map[ir.ValueID]ir.ValueID{}
		for i := range sg.g.Values {
			v := &sg.g.Values[i]
			id, ok := o.step.Lookup(v.Name)
			if !ok || o.step.Value(id).Op != v.Op {
				continue
			}
			local[k][id] = ir.ValueID(i)
			if o.lay.Of[id] != k {
				o.infos[k].leaves = append(o.infos[k].leaves, id) // brought in: a leaf, a constant
			}
		}
	}
	for k, li := range o.infos {
		g := li.sg.g
		for i := range g.Values {
			for slot, a := range g.Values[i].Args {
				av := g.Value(a)
				id, ok := o.step.Lookup(av.Name)
				if av.Op != ir.OpInput || !ok || o.step.Value(id).Op == ir.OpInput {
					continue // made in this layer, or a leaf of the step
				}
				from := o.lay.Of[id]
				prod, ok := local[from][id]
				if from < 0 || from == k || !ok {
					continue
				}
				li.cross = append(li.cross, crossEdge{from: from, prod: prod, leaf: a, use: ir.ValueID(i), slot: slot,
					shape: av.Type.Shape, elemBytes: av.Type.DType.Size(), follower: g.Values[i].Op.Def().Follower})
			}
		}
	}
	return o.infos
}

// layerPoints returns the solutions of layer k on (s, l): the fastest under the device
// memory first, then, when lean is set, the memory-lean ones (solved on first request).
func (o *oracle) layerPoints(k int, s mesh.Submesh, l mesh.LogicalShape, lean bool) []layerPoint {
	sg := o.infos[k].sg
	key := solveKey{sg.hash, s, l}
	pts, ok := o.points[key]
	if !ok {
		if sol, ran := o.solved[key]; o.lazy && (!ran || sol == nil) {
			return nil // not solved yet: settle decides whether it ever is
		}
		sol := o.solve(k, k+1, s, l)
		if !sol.ok {
			o.points[key] = nil
			return nil
		}
		pts = []layerPoint{pointOf(sg, sol)}
		o.points[key] = pts
	}
	if !lean {
		return pts
	}
	fractions := leanFractions
	if o.infos[k].convs && meshFactor(l) > 4 {
		fractions = convLeanFractions
	}
	return o.leanPoints(sg, key, k, pts, o.weight(k), pts[0].res, fractions)
}

// convLeanFractions are the lean budgets of a convolution layer (Wide-ResNet's blocks) on
// a two-dimensional mesh, at its own weight (layerPoints) and at a first stage's
// (weighedPoints): the budget 0, that is, the plan of the layer's least footprint the
// min-peak ILP finds (solveStageBudget: sharding.MemoryError.Plan), the point every budget
// under that footprint gives. Their 2-D ILPs (7–11k variables) under a budget above the
// footprint (0.6 or 0.3 of the fastest point's peak) stopped at leanIterations inside the
// LP root on every Wide-ResNet row measured, 1.4–4.6 CPU s each for no point: 12 of them in
// wresnet-4b/16's first count, 5 in wresnet-6.8b/32's (docs/DECISIONS.md, "wres3").
var convLeanFractions = []float64{0}

// holdsConv reports whether g computes a convolution or one of its gradients.
func holdsConv(g *ir.Graph) bool {
	for i := range g.Values {
		switch g.Values[i].Op {
		case ir.OpConv2D, ir.OpConv2DInputGrad, ir.OpConv2DFilterGrad:
			return true
		}
	}
	return false
}

// leanFractions are the budgets of a layer's memory-lean points, as fractions of its
// fastest point's peak; weighedFractions those of a layer priced at a first stage's weight
// (weighedPoints): the leanest only, which mostly ends in the min-peak plan at once (tens
// of ms on gpt-6.7b/16), where the 0.6 budget ran into the lean limit (3-4.5 CPU s each,
// 28 of them on gpt-6.7b/16 before a plan).
var leanFractions, weighedFractions = []float64{0.6, 0.3}, []float64{0.3}

// leanPoints adds to pts, the points of layer graph sg (solve key key) whose first is the
// fastest, its memory-lean ones at fractions of its peak (solved once), weighed by b; warm,
// if set, is the solve lp_solve starts the first lean one from; spotK is the layer's
// position for leanSpot (−1−k for layer k at a first stage's weight, weighedPoints: its
// own ILP).
func (o *oracle) leanPoints(sg *stageGraph, key solveKey, spotK int, pts []layerPoint, b float64, warm *sharding.Result, fractions []float64) []layerPoint {
	s, l := key.sub, key.logical
	if len(pts) == 0 || pts[0].res == nil || o.leaned[key] || o.ctx.Err() != nil {
		return pts
	}
	if o.memory > 0 && pts[0].res.PeakMemory > o.memory {
		// Nothing fits the device memory: the one point is already the plan of least
		// memory (solveStageBudget's fallback), and leaner budgets only solve it again.
		return pts
	}
	o.leaned[key] = true
	// Budgets at fractions of the fastest point's peak; a budget under the layer's least
	// footprint gets the plan of that footprint the sharding pass's min-peak ILP found
	// (sharding.MemoryError.Plan, solveStageBudget; its Budget is that footprint), and so
	// would every smaller budget: the leaner ones are not solved. Each starts lp_solve from
	// the basis of the last solve of the layer's ILP (warm.go in passes/sharding): only the
	// memory rows' budget changes.
	peak, last := pts[0].res.PeakMemory, warm
	if len(fractions) > 1 && s.Hosts > 1 && meshFactor(l) > 4 && pts[0].res.ILP.Variables >= leanBigVars {
		fractions = []float64{0} // the min-peak plan only (leanBigVars)
	}
	for _, f := range fractions {
		spot := leanSpot{spotK, s, l, f}
		if o.leanStuck[spot] {
			continue // stopped at its effort limit at another count (leanSpot)
		}
		budget := max(1, int64(f*float64(peak))) // 1 byte, not 0 (the device memory): the min-peak plan
		sol := o.solveStageBudget(sg, s, l, budget, nil, last, nil)
		if errors.Is(sol.err, ilp.ErrTimeout) && meshFactor(l) > 4 {
			o.leanStuck[spot] = true
		}
		if !sol.ok || sol.res == nil {
			continue
		}
		last = sol.res
		pts = paretoAdd(pts, pointOf(sg, sol), b)
		if sol.res.Budget > budget {
			break
		}
	}
	o.points[key] = pts
	return pts
}

// leanBigVars: a layer whose ILP has this many variables or more, on a two-dimensional
// mesh over several hosts, gets one memory-lean point, the plan of its least footprint
// (the sharding pass's min-peak ILP, sharding.MemoryError.Plan, asked for by a budget of
// one byte). On the MoE rows from 16 GPUs (layers of 23-32k variables on 2×8 and 4×8)
// every 0.6 budget stopped at the lean limit without a plan, 4-5 CPU s each; the 0.3
// budget either ended in that min-peak plan in about 0.1 s or stopped at the limit too
// (docs/DECISIONS.md, "moe3").
var leanBigVars = 20000

// leanSpot is a memory-lean solve of layer k (by position) on (s, l) at fraction f of
// its fastest point's peak. One on a two-dimensional mesh that stopped at its effort limit
// (leanIterations) without a plan is not tried at the other micro-batch counts, whose
// layer k differs only in its batch dimension (oracle.leanStuck): on Wide-ResNet's 2-D
// layers (7–11k variables) the 0.6 budget's ILP never got through its LP root within the
// limit, at 2.5–9 CPU s each, a dozen a count (docs/DECISIONS.md, "widebig").
type leanSpot struct {
	k       int
	sub     mesh.Submesh
	logical mesh.LogicalShape
	f       float64
}

func pointOf(sg *stageGraph, sol *stageSolution) layerPoint {
	return layerPoint{res: sol.res, time: sol.cost.Time, step: sol.cost.Step, weights: sol.cost.WeightBytes, act: sol.cost.ActBytes,
		remats: sol.remats}
}

// paretoAdd adds p to a layer's points unless one of them is no slower and no larger.
// The fastest point stays first.
func paretoAdd(pts []layerPoint, p layerPoint, b float64) []layerPoint {
	for _, q := range pts {
		if q.total(b) <= p.total(b) && q.memory() <= p.memory() {
			return pts
		}
	}
	return append(pts, p)
}

// alignJobs lists, as solves to run, a second solution of each layer whose fastest solution disagrees with a
// neighbour's on the layout of a tensor crossing between them: the layer re-solved with
// each value it sends to another layer pinned to the layout the receiving layer's fastest
// solution chose for it (the layout the receiver would like to be handed). The boundary
// becomes part of the answer; the chain DP then picks, per range, the points that agree.
// On a latency-bound model this is what keeps a range's composition near its ILP: a
// layer's output, which nothing in the layer reads, is otherwise left in whatever layout is
// cheapest to produce, and its consumer pays a collective to undo it. The solves run on
// all cores.
func (o *oracle) alignJobs(meshes []meshKey) []job {
	if o.layerInfos() == nil {
		return nil
	}
	var jobs []job
	for _, mk := range meshes {
		for k := range o.lay.L {
			pk := o.layerPoints(k, mk.sub, mk.logical, false)
			if len(pk) == 0 || pk[0].res == nil {
				continue
			}
			for _, side := range []int{+1, -1, 0} {
				if j := o.servedJob(k, mk, pk[0], side); j != nil {
					jobs = append(jobs, *j)
				}
			}
		}
	}
	return jobs
}

// servedJob is the solve of layer k (whose fastest point is pk) with the values it sends
// to the layers on one side pinned to the layouts those layers' fastest points chose for
// them: side +1 the later layers (activations), −1 the earlier ones (gradients), 0 both.
// A range's first layer sends its gradients out of the range, where their layout is free,
// and its last layer its activations: each takes the one-sided variant. It returns nil
// when the variant would change nothing or is already listed.
func (o *oracle) servedJob(k int, mk meshKey, pk layerPoint, side int) *job {
	force := map[ir.ValueID]mesh.Spec{}
	var b strings.Builder
	differ := false
	for _, j := range nearest(k, o.lay.L) {
		if side > 0 && j < k || side < 0 && j > k {
			continue
		}
		pj := o.layerPoints(j, mk.sub, mk.logical, false)
		if len(pj) == 0 || pj[0].res == nil {
			continue
		}
		for _, e := range o.infos[j].cross {
			if e.from != k {
				continue
			}
			if _, ok := force[e.prod]; ok {
				continue
			}
			want := pj[0].res.Specs[e.leaf]
			force[e.prod] = want
			fmt.Fprintf(&b, "|%d=%s", e.prod, want)
			differ = differ || !pk.res.Specs[e.prod].Equal(want)
		}
	}
	sg := o.infos[k].sg
	key := solveKey{sg.hash + b.String(), mk.sub, mk.logical}
	if _, ok := o.solved[key]; ok || !differ {
		return nil
	}
	o.solved[key] = nil
	return &job{key: key, sg: sg, force: force, base: solveKey{sg.hash, mk.sub, mk.logical}}
}

// applyAligned adds the aligned solutions alignJobs asked for to their layers' points.
func (o *oracle) applyAligned(jobs []job) {
	for _, j := range jobs {
		sol := o.solved[j.key]
		if sol == nil || !sol.ok || sol.res == nil {
			continue
		}
		o.points[j.base] = append(o.points[j.base], pointOf(j.sg, sol))
	}
}

// nearest lists the layers other than k, nearest first (k+1 before k−1).
func nearest(k, layers int) []int {
	var out []int
	for d := 1; d < layers; d++ {
		if k+d < layers {
			out = append(out, k+d)
		}
		if k-d >= 0 {
			out = append(out, k-d)
		}
	}
	return out
}

// composed prices layers [start, end) on (s, l) from its layers' points.
func (o *oracle) composed(start, end int, s mesh.Submesh, l mesh.LogicalShape) composedCost {
	key := rangeKey{start, end, s, l}
	if c, ok := o.composedAt[key]; ok {
		return c
	}
	c := o.compose(start, end, s, l)
	o.composedAt[key] = c
	if c.ok {
		if o.composedEver == nil {
			o.composedEver = map[rangeKey]bool{}
		}
		exact, seen := o.composedEver[key]
		o.composedEver[key] = c.exact && (exact || !seen)
	}
	return c
}

func (o *oracle) compose(start, end int, s mesh.Submesh, l mesh.LogicalShape) composedCost {
	if o.layerInfos() == nil {
		return composedCost{}
	}
	pts := make([][]layerPoint, end-start)
	for k := start; k < end; k++ {
		if pts[k-start] = o.pointsIn(start, k, s, l); len(pts[k-start]) == 0 {
			return composedCost{}
		}
	}
	path, c := o.chain(start, pts, 0)
	if o.memory > 0 && !fitsSomeWay(c.cost, float64(o.memory)) && o.leanFor(start, end, s, l) && o.mayFit(start, end, s, l) {
		for k := start; k < end; k++ {
			if lean := o.layerPoints(k, s, l, true); len(lean) > 0 {
				pts[k-start] = lean
			} else if lean := o.weighedPoints(k, s, l); len(lean) > 0 && o.lazy && o.reweighs(start, k) {
				pts[k-start] = lean // priced at the range's weight (pointsIn): its lean points at that weight
			}
		}
		path, c = o.leanest(start, pts)
	}
	c.exact = c.exact && o.disjointLeaves(start, end) && allFastest(path)
	return c
}

// leanFor says whether compose may solve memory-lean points for layers [start, end) on
// (s, l): in the lazy search, only for a range an optimistic plan ran (markLean), as the
// lazy search solves a layer only where an optimistic plan runs it (bound.go). Each lean
// point is a layer ILP under a budget that binds, on 2-D meshes a 3,000-iteration solve
// that mostly ends without a plan; the composed DP asked for them for every range whose
// layers were solved on a mesh (MoE-70B/64: five such solves, 27 of its first 104 CPU s,
// none with a plan). A range no optimistic plan runs is still composed from its layers'
// fastest points; the plan found is held to the optimistic bound as before (exactly).
func (o *oracle) leanFor(start, end int, s mesh.Submesh, l mesh.LogicalShape) bool {
	return !o.lazy || o.leanAll || o.leanAt[rangeKey{start, end, s, l}]
}

// markLean lets compose solve memory-lean points for the stages of p, an optimistic plan
// (leanFor), and forgets the compositions of those newly marked; with p nil, for every
// range, and forgets every composition.
func (o *oracle) markLean(p *dp.Result) {
	if p == nil {
		o.leanAll = true
		clear(o.composedAt)
		return
	}
	if o.leanAt == nil {
		o.leanAt = map[rangeKey]bool{}
	}
	for _, st := range p.Stages {
		k := stageKey(st)
		if !o.leanAt[k] {
			o.leanAt[k] = true
			delete(o.composedAt, k)
		}
	}
}

// mayFit reports whether some way to run layers [start, end) on (s, l) may fit the device
// memory by the range's bounded price (boundedRange: the layers' weights spread perfectly
// and the memory floors, each way a lower bound on that way's memory, TestBoundedRangeIsLower).
// Where none does, no plan of the range fits whatever its layers' points, so compose
// solves no memory-lean points for it (they would only be solved to make it fit): on
// Alpa's GPT rows the DP asks first for ranges of many layers on few devices, whose
// weights alone exceed the memory, and each set off the lean solves of its layers.
func (o *oracle) mayFit(start, end int, s mesh.Submesh, l mesh.LogicalShape) bool {
	var c dp.StageCost
	for k := start; k < end; k++ {
		b, ok := o.layerBound(k, s, l)
		if !ok {
			return true
		}
		c.WeightBytes += b.WeightBytes
	}
	return fitsSomeWay(o.boundedRange(c, start, end, s, l), float64(o.memory))
}

// leanest raises λ in time + λ·memory until the composition fits the device memory, then
// bisects for the least λ that fits; without a fit it returns the least memory found.
func (o *oracle) leanest(start int, pts [][]layerPoint) ([]int, composedCost) {
	budget := float64(o.memory)
	path, c := o.chain(start, pts, 0)
	if c.cost.Memory(1) <= budget {
		return path, c
	}
	lo, hi := 0.0, 0.0
	bestPath, best := path, c
	for lam := 1e-15; lam < 1e3; lam *= 4 {
		p, x := o.chain(start, pts, lam)
		if x.cost.Memory(1) < best.cost.Memory(1) {
			bestPath, best = p, x
		}
		if x.cost.Memory(1) <= budget {
			hi = lam
			break
		}
		lo = lam
	}
	if hi == 0 {
		return bestPath, best
	}
	bestPath, best = o.chain(start, pts, hi)
	for range 20 {
		mid := math.Sqrt(max(lo, 1e-18) * hi)
		p, x := o.chain(start, pts, mid)
		if x.cost.Memory(1) <= budget {
			hi, bestPath, best = mid, p, x
		} else {
			lo = mid
		}
	}
	return bestPath, best
}

// chain picks one point per layer minimising time + lam·memory plus the corrections on
// the edges between adjacent layers, by a DP over the chain; edges between layers further
// apart are priced on the chosen path. It returns the path (point index per layer) and its
// true cost.
func (o *oracle) chain(start int, pts [][]layerPoint, lam float64) ([]int, composedCost) {
	n, b := len(pts), o.weight(start)
	best := make([][]float64, n)
	from := make([][]int, n)
	for i := range n {
		best[i] = make([]float64, len(pts[i]))
		from[i] = make([]int, len(pts[i]))
		for q, pq := range pts[i] {
			own := pq.total(b) + lam*pq.memory()
			if i == 0 {
				best[i][q] = own
				continue
			}
			best[i][q] = math.Inf(1)
			for p := range pts[i-1] {
				x := best[i-1][p] + own + b*o.adjacent(start+i-1, pts[i-1][p], start+i, pq)
				if x < best[i][q] {
					best[i][q], from[i][q] = x, p
				}
			}
		}
	}
	path := make([]int, n)
	for q := range best[n-1] {
		if best[n-1][q] < best[n-1][path[n-1]] {
			path[n-1] = q
		}
	}
	for i := n - 1; i > 0; i-- {
		path[i-1] = from[i][path[i]]
	}
	return path, o.price(start, pts, path)
}

// adjacent is the correction between layer a at point pa and layer b = a+1 at point pb:
// the edges from a into b and from b into a.
func (o *oracle) adjacent(a int, pa layerPoint, b int, pb layerPoint) float64 {
	return o.correction(b, pb, a, pa) + o.correction(a, pa, b, pb)
}

// correction sums, over the edges into layer k (at point pk) from layer j (at point pj),
// what the range pays more than layer k's own solution paid: resharding from the
// producer's layout instead of from the leaf's.
func (o *oracle) correction(k int, pk layerPoint, j int, pj layerPoint) float64 {
	if pk.res == nil || pj.res == nil {
		return 0
	}
	sum := 0.0
	for _, e := range o.infos[k].cross {
		if e.from != j {
			continue
		}
		want := pk.res.Strategies[e.use].In[e.slot]
		sum += o.reshardTime(pk.res.Mesh, e, pj.res.Specs[e.prod], want) - o.reshardTime(pk.res.Mesh, e, pk.res.Specs[e.leaf], want)
	}
	return sum
}

type reshardMemoKey struct {
	shape2   [2]int
	alpha    [2]float64
	beta     [2]float64
	shape    string // the tensor's
	bytes    int
	from, to string
}

func (o *oracle) reshardTime(lm *mesh.LogicalMesh, e crossEdge, from, to mesh.Spec) float64 {
	if from.Equal(to) {
		return 0
	}
	k := reshardMemoKey{lm.Shape, lm.Alpha, lm.Beta, shapeKey(e.shape), e.elemBytes, from.String(), to.String()}
	if t, ok := o.reshardMemo[k]; ok {
		return t
	}
	r, err := mesh.ReshardCost(lm, e.shape, e.elemBytes, from, to)
	t := r.Time
	if err != nil {
		t = math.Inf(1) // a layout the producer's mesh cannot hold: never chosen by the ILP
	}
	o.reshardMemo[k] = t
	return t
}

func shapeKey(s []int) string {
	b := make([]byte, 0, 8*len(s))
	for _, d := range s {
		for x := uint64(d); ; x >>= 7 {
			if x < 0x80 {
				b = append(b, byte(x))
				break
			}
			b = append(b, byte(x)|0x80)
		}
	}
	return string(b)
}

// price is the cost of the composition path picks: every layer's point and every
// crossing edge inside the range corrected.
func (o *oracle) price(start int, pts [][]layerPoint, path []int) composedCost {
	c := composedCost{ok: true, exact: true}
	end := start + len(pts)
	for i, q := range path {
		p := pts[i][q]
		c.cost.Time += p.time
		c.cost.Step += p.step
		c.cost.WeightBytes += p.weights
		c.cost.ActBytes += p.act
		if p.res == nil {
			c.exact = false
		}
		k := start + i
		for _, e := range o.infos[k].cross {
			if e.from < start || e.from >= end {
				continue
			}
			pj := pts[e.from-start][path[e.from-start]]
			if p.res == nil || pj.res == nil {
				continue
			}
			want := p.res.Strategies[e.use].In[e.slot]
			d := o.reshardTime(p.res.Mesh, e, pj.res.Specs[e.prod], want) - o.reshardTime(p.res.Mesh, e, p.res.Specs[e.leaf], want)
			c.cost.Time += d
			if d != 0 || e.follower {
				c.exact = false
			}
		}
	}
	c.cost.Time = max(c.cost.Time, 0)
	chosen := make([]layerPoint, len(path))
	for i, q := range path {
		chosen[i] = pts[i][q]
	}
	c.cost = o.withRemat(c.cost, chosen)
	c.points = chosen
	return c
}

// withRemat gives a composed plain cost the ways to run the range recomputing, estimated
// from its layers' own (remat.go prices them per stage graph, which a composition does not
// have): the recomputed time adds up; recomputing the whole range keeps its first layer's
// inputs in flight and holds, once, the plain activations of one micro-batch; layer by
// layer keeps every layer's input and holds once the largest layer's recomputed values.
// The search only chooses by these: the chosen stages are re-priced by remat.go (exactly).
// Arranged as stageSolution.costFor arranges a solved stage's.
func (o *oracle) withRemat(plain dp.StageCost, layers []layerPoint) dp.StageCost {
	if o.remat == RematNone || len(layers) == 0 {
		return plain
	}
	whole, layered := plain, plain
	whole.Recompute, layered.Recompute, layered.Checkpoints = true, true, true
	whole.ActBytes, whole.OnceBytes, layered.ActBytes, layered.OnceBytes = 0, 0, 0, 0
	for i, p := range layers {
		if len(p.remats) < 2 {
			return plain
		}
		whole.Time += p.remats[0].Time - p.time
		layered.Time += p.remats[1].Time - p.time
		whole.OnceBytes += p.act
		layered.ActBytes += p.remats[0].ActBytes
		layered.OnceBytes = max(layered.OnceBytes, p.remats[0].OnceBytes)
		if i == 0 {
			whole.ActBytes = p.remats[0].ActBytes
		}
	}
	if o.remat == RematFull {
		whole.Remat = []dp.StageCost{layered}
		return whole
	}
	plain.Remat = []dp.StageCost{whole, layered}
	return plain
}

// fitsSomeWay reports whether c, run plainly or recomputing one of its ways, fits memory
// with one micro-batch in flight. The memory-lean points are solved only where none does:
// where recomputation fits, the DP has a way to run the range already, and the lean solves
// (each a layer ILP under a budget, the dearest of the search on 2-D meshes) were most of
// the compile time of Alpa's suite under --microbatches auto (docs/DECISIONS.md).
func fitsSomeWay(c dp.StageCost, memory float64) bool {
	if c.Memory(1) <= memory {
		return true
	}
	for _, r := range c.Remat {
		if r.Memory(1) <= memory {
			return true
		}
	}
	return false
}

func allFastest(path []int) bool {
	for _, q := range path {
		if q != 0 {
			return false
		}
	}
	return true
}

// disjointLeaves reports whether no leaf or constant is read by two layers of [start, end).
func (o *oracle) disjointLeaves(start, end int) bool {
	seen := map[ir.ValueID]bool{}
	for k := start; k < end; k++ {
		for _, id := range o.infos[k].leaves {
			if seen[id] {
				return false
			}
			seen[id] = true
		}
	}
	return true
}

// lower is the optimistic price of layers [start, end) on (s, l): the sum of its layers'
// fastest times, a lower bound on the range's ILP (a range plan cut to one layer is a plan
// of that layer, up to the followers merged across a layer boundary), with its weights and
// the largest of its layers' activations. In the lazy search (bound.go) a layer not
// solved yet counts its bound (layerBound); a range with such a layer then has the ways
// to run boundedRange gives it, with the memory floors and the recomputed time of all its
// layers instead of the solved layers' activations; a range of solved layers has its
// memory raised to the same floors (floored).
//
// A range's ILP weighs w·t + u, w its weight (weightOf: B from layer 0, else 1), and so
// does each layer's own ILP at its own weight: a range from layer 0 holds later layers
// solved at weight 1, whose (t, u) bound nothing at weight B (t and u trade: GPT-39B's
// middle layer on 8×8 gives B·t + u = 71.8 s at weight 1, 15.2 s at weight B = 32). Such a
// layer is priced by reweighed instead.
func (o *oracle) lower(start, end int, s mesh.Submesh, l mesh.LogicalShape) (dp.StageCost, bool) {
	if o.layerInfos() == nil {
		return dp.StageCost{}, false
	}
	var c dp.StageCost
	var fastest []layerPoint
	bounded := false
	for k := start; k < end; k++ {
		pts := o.pointsIn(start, k, s, l)
		if len(pts) == 0 && o.lazy && !o.isSolved(k, s, l) {
			b, ok := o.layerBound(k, s, l)
			if !ok {
				return dp.StageCost{}, false
			}
			if r := o.relaxed[solveKey{o.infos[k].sg.hash, s, l}]; r != nil && r.ok {
				b.Time, b.Step = r.cost.Time, r.cost.Step // solved without its memory rows (bound.go)
				if o.reweighs(start, k) {
					b.Time, b.Step = o.reweighed(k, s, l, r.cost.Time+r.cost.Step)
				}
			}
			if o.reweighs(start, k) {
				if w, ok := o.weighedPrice(k, s, l); ok {
					b.Time, b.Step = w.Time, w.Step
				}
			}
			c.Time += b.Time
			c.Step += b.Step
			c.WeightBytes += b.WeightBytes
			bounded = true
			continue
		}
		if len(pts) == 0 {
			return dp.StageCost{}, false
		}
		t, step, act := pts[0].time, pts[0].step, pts[0].act
		for _, p := range pts[1:] {
			t, step, act = min(t, p.time), min(step, p.step), min(act, p.act)
		}
		if o.reweighs(start, k) {
			least := pts[0].time + pts[0].step
			for _, p := range pts[1:] {
				least = min(least, p.time+p.step)
			}
			t, step = o.reweighed(k, s, l, least)
			if w, ok := o.weighedPrice(k, s, l); ok {
				t, step = w.Time, w.Step
			}
		}
		c.Time += t
		c.Step += step
		c.WeightBytes += pts[0].weights
		c.ActBytes = max(c.ActBytes, act)
		fastest = append(fastest, pts[0])
	}
	if bounded {
		return o.boundedRange(c, start, end, s, l), true // its ways to run (bound.go)
	}
	return o.floored(o.withRemat(c, fastest), start, end, s, l), true
}

// pointsIn returns the points of layer k as a range from layer start prices it (compose,
// lower): the layer's own (layerPoints), or, in the lazy search, where the range weighs
// the layer otherwise than its own solve (reweighs: layer k > 0 in a first stage) and that
// own solve has no plan, the layer's solve at the range's weight (weighedLayer) where it
// is exact: solved without its memory rows, its plan fits the memory (solveRelaxed), so it
// is the layer's optimum at that weight under the memory and a real plan of it (issue 13,
// branch gptbig2). A first stage's price never reads the layer's weight-1 time (lower
// takes weighedPrice), so the lazy search does not solve the layer at weight 1 under the
// memory for a first stage where this point exists (unsolved): on GPT-39B/64 those were
// memory-bound ILPs that ran into lp_solve's limit (30 CPU s each) only to price a stage by
// plans at the wrong weight.
func (o *oracle) pointsIn(start, k int, s mesh.Submesh, l mesh.LogicalShape) []layerPoint {
	pts := o.layerPoints(k, s, l, false)
	if len(pts) > 0 || !o.lazy || !o.reweighs(start, k) {
		return pts
	}
	if w := o.weighedExact(k, s, l); w != nil {
		return []layerPoint{pointOf(o.weighedLayer(k), w)}
	}
	if o.firstSolved(start, k, s, l) {
		return o.firstPts[solveKey{o.infos[k].sg.hash, s, l}]
	}
	return pts
}

// firstLPVars: in the lazy search, a later layer k > 0 of a first stage on a
// two-dimensional mesh over several hosts, whose solve at the stage's weight does not fit
// the memory (weighedExact: the stage prices it by that solve, weighedPrice) and whose own
// ILP of this many variables or more does not fit it either without its memory rows, gets
// its points (firstPoints) from its weight-1 ILP under the memory answered without
// lp_solve (sharding.Options.NoLPAbove): the Lagrangian search's best plan that fits. Such
// a stage reads of those points their plans (compose, restrictStage) and memory (lower's
// caveat, as before), never their time (lower takes weighedPrice), so the optimistic
// price is unchanged; the solve stays the layer's own for every other stage (unsolved
// asks for it where a later stage runs the layer). On MoE-27B/32 at 2 micro-batches the
// two such solves on 4×8 (21.7k and 22.0k variables, relaxed plans at 65 and 31 GiB
// against 16) ran lp_solve to the 40,000-iteration limit and to the deadline, 52 CPU s
// for no plan (docs/DECISIONS.md, "moe27").
var firstLPVars = leanBigVars

// firstUse says whether layer k, in a range from start on (s, l), may take its points
// from firstPts: a first stage's later layer, priced by its weighed relaxed solve, which
// ran and does not fit (weighedExact would answer otherwise).
func (o *oracle) firstUse(start, k int, s mesh.Submesh, l mesh.LogicalShape) bool {
	if !o.lazy || start != 0 || !o.reweighs(start, k) || o.remat == RematFull {
		return false
	}
	r := o.relaxed[solveKey{o.weighedLayer(k).hash, s, l}]
	return r != nil && r.ok && !r.exact
}

// firstSolved says whether layer k in a range from start on (s, l) has its firstPts.
func (o *oracle) firstSolved(start, k int, s mesh.Submesh, l mesh.LogicalShape) bool {
	return o.firstUse(start, k, s, l) && len(o.firstPts[solveKey{o.infos[k].sg.hash, s, l}]) > 0
}

// layerJob is the solve unsolved asks for of layer k of stage st (key its own solve
// key): relaxed first where relaxes says so, then under the memory; for a first stage's
// later layer as firstLPVars describes, its firstPts (once: where they give no point,
// the layer's own solve as before).
func (o *oracle) layerJob(st dp.Stage, k int, key solveKey) job {
	j := job{key: key, sg: o.infos[k].sg, relaxed: o.relaxes(key)}
	if j.relaxed || key.sub.Hosts < 2 || meshFactor(key.logical) <= 4 || !o.firstUse(st.Start, k, key.sub, key.logical) {
		return j
	}
	if _, tried := o.firstPts[key]; tried {
		return j
	}
	if _, solved := o.solved[key]; solved {
		return j
	}
	if r := o.relaxed[key]; r == nil || !r.ok || r.exact || r.res == nil || r.res.ILP.Variables < firstLPVars {
		return j
	}
	j.first = true
	return j
}

// weighedPoints are layer k's points on (s, l) at a first stage's weight: its weighed
// solve where exact (weighedExact), then its leanest memory-lean point solved at that
// weight (leanPoints, weighedFractions; lp_solve warm from the weighed solve, as layerPoints starts from a layer's
// relaxed solve where that is its point); nil where the weighed solve is not exact.
func (o *oracle) weighedPoints(k int, s mesh.Submesh, l mesh.LogicalShape) []layerPoint {
	w := o.weighedExact(k, s, l)
	if w == nil {
		return nil
	}
	sg := o.weighedLayer(k)
	key := solveKey{sg.hash, s, l}
	pts, ok := o.points[key]
	if !ok {
		pts = []layerPoint{pointOf(sg, w)}
		o.points[key] = pts
	}
	fractions := weighedFractions
	if o.infos[k].convs && meshFactor(l) > 4 {
		fractions = convLeanFractions
	}
	return o.leanPoints(sg, key, -1-k, pts, o.weight(0), pts[0].res, fractions)
}

// weighedExact is layer k's solve on (s, l) at a first stage's weight where it ran and is
// exact (its relaxed plan fits the memory), else nil.
func (o *oracle) weighedExact(k int, s mesh.Submesh, l mesh.LogicalShape) *stageSolution {
	if o.remat == RematFull {
		return nil
	}
	r := o.relaxed[solveKey{o.weighedLayer(k).hash, s, l}]
	if r == nil || !r.ok || !r.exact {
		return nil
	}
	return r
}

// reweighs says whether layer k, in a range from layer start, was solved at another weight
// than the range's ILP weighs it at, where its optimum depends on the weight.
func (o *oracle) reweighs(start, k int) bool {
	sg := o.infos[k].sg
	return sg.trades && max(sg.mb, 1) != max(o.weightOf(start), 1)
}

// reweighed is the optimistic (t, u) of layer k on (s, l) in a range weighed otherwise
// than its own solve and not solved at the range's weight yet (weighedPrice), least the
// least t + u of the layer's solve (its ILP's objective at
// weight 1, the only weight a layer after layer 0 is solved at). A range plan cut to layer
// k is a plan of the layer (lower's premise) of some (t', u') with t' ≥ t_b and u' ≥ u_b,
// the layer's kernel bounds (layerBound, part by part), and t' + u' ≥ least. At any
// weight w ≥ 1, w·t' + u' is least at t' = t_b, u' = max(u_b, least − t_b): that pair is
// below the range's part of it in w·t + u, in t, and in t + u — all the DP's step reads of
// a first stage (Σ t + (B−1)·max t + u₀). It is never above the weight-1 solve's own
// (t, u) in w·t + u, and loose where communication dominates t (t_b is compute spread
// perfectly), the price of solving the layer once.
func (o *oracle) reweighed(k int, s mesh.Submesh, l mesh.LogicalShape, least float64) (float64, float64) {
	b, ok := o.layerBound(k, s, l)
	if !ok {
		return 0, least
	}
	return b.Time, max(b.Step, least-b.Time)
}

// weighedLayer is layer k's graph as the ILP of a range from layer 0 weighs it (B·t + u,
// where its own ILP weighs t + u: reweighs): its solve prices the layer in such a range
// (weighedPrice). Its solve key differs from the layer's own by B (hashAt).
func (o *oracle) weighedLayer(k int) *stageGraph {
	if sg, ok := o.firstLayers[k]; ok {
		return sg
	}
	if o.firstLayers == nil {
		o.firstLayers = map[int]*stageGraph{}
	}
	sg := *o.infos[k].sg
	sg.mb = o.weightOf(0)
	sg.hash = sg.hashAt(sg.mb)
	sg.bounder = nil // made on its own use, not shared with the layer's
	o.firstLayers[k] = &sg
	return &sg
}

// weighedPrice is the price (t, u) of layer k on (s, l) solved at a range from layer 0's
// weight (weighedLayer) without its memory rows (solveRelaxed): at most the least w·t + u
// of any plan of the layer, under the memory or not, plain or recomputing, so under
// lower's premise its part of the range's w·t + u is no less. Relaxed always: a solve
// under the memory falls back to other plans where it binds (recomputing, the least
// footprint), whose prices bound nothing (gpt-1.3b/4 at B = 16: a one-stage optimistic
// price of 164 s against a plan of 118.5 s). ok is false while it has not run; in the
// lazy search unsolved asks for it once the layer's own solve has run, otherwise it is
// solved here. Not under RematFull, whose solves have their own liveness (relaxes).
func (o *oracle) weighedPrice(k int, s mesh.Submesh, l mesh.LogicalShape) (dp.StageCost, bool) {
	if o.remat == RematFull {
		return dp.StageCost{}, false
	}
	sg := o.weighedLayer(k)
	key := solveKey{sg.hash, s, l}
	r, ran := o.relaxed[key]
	if !ran && !o.lazy && o.ctx.Err() == nil {
		r = o.solveRelaxed(sg, s, l)
		o.relaxed[key] = r
	}
	if r != nil && r.ok {
		return r.cost, true
	}
	return dp.StageCost{}, false
}
