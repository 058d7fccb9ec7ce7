package autopar

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/autopar/autopar/dp"
	"github.com/autopar/autopar/internal/textdist"
	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/mesh"
	"github.com/autopar/autopar/passes"
	"github.com/autopar/autopar/passes/sharding"
	"github.com/autopar/autopar/units"
)

// Explaining a plan means asking the questions compile answered again, with the same
// inputs: the stage's subgraph is cut from the training step exactly as the oracle cut it
// (the step's non-leaf values of the stage's layers, in graph order) and solved by the
// oracle's own solveStage, so the candidates, their order and their prices are the ones the
// ILP chose among, under the ILP time limit plan.json records.

// Why says which fact decided an op's strategy.
type Why string

const (
	// WhyCheapest: the chosen strategy is the cheapest given its neighbours' layouts.
	WhyCheapest Why = "cheapest"
	// WhyMemory: the memory budget decided: either a locally cheaper strategy exists but the
	// plan around it would break the budget or be dearer under it, or this one is the
	// cheapest given neighbours whose layouts the budget forced (without the budget the
	// stage would be cheaper and this value laid out otherwise).
	WhyMemory Why = "memory"
	// WhyNeighbours: a locally cheaper strategy exists, but the best plan with it costs the
	// stage more, because neighbours would have to change layout or reshard.
	WhyNeighbours Why = "neighbours"
	// WhyTied: a locally cheaper strategy exists and the plan with it would cost no more,
	// but the ILP's simplifications (a follower merged into its leader, identical layers
	// solved once) tied this op to another's choice.
	WhyTied Why = "tied"
)

// OpExplanation is why a value got its sharding: its candidates on its stage's mesh, each
// priced against its neighbours' chosen layouts.
type OpExplanation struct {
	Name  string `json:"name"`
	Op    string `json:"op"`
	Type  string `json:"type"`
	Stage int    `json:"stage"`
	Layer int    `json:"layer"`
	Mesh  string `json:"mesh"`
	// Candidates are in the order the ILP indexes them (sharding.CandidatesWith).
	Candidates []CandidateCost `json:"candidates"`
	Chosen     int             `json:"chosen"`   // index into Candidates
	Cheapest   int             `json:"cheapest"` // the locally cheapest (lowest index on ties)
	Why        Why             `json:"why"`
	Reason     string          `json:"reason"` // one sentence
	// StageCost is the re-solved stage's total per micro-batch, the ILP's objective.
	StageCost float64 `json:"stage_cost"`
	// UnbudgetedCost is the stage's best cost with no memory budget, and UnbudgetedSpec this
	// value's layout in that plan: where they differ from the chosen, the budget shaped it.
	UnbudgetedCost float64   `json:"unbudgeted_cost"`
	UnbudgetedSpec mesh.Spec `json:"unbudgeted_spec"`
	// Forced is the best plan of the stage with the cheapest candidate forced, when it is
	// not the chosen one.
	Forced *ForcedPlan `json:"forced,omitempty"`
	// Notes say where the re-solve disagreed with plan.json (neighbours are then priced
	// with plan.json's layouts).
	Notes []string `json:"notes,omitempty"`
}

// CandidateCost is one candidate strategy of an op with its costs in seconds per
// micro-batch. Total = Compute + Comm + ReshardIn + ReshardOut.
type CandidateCost struct {
	Index       int         `json:"index"`
	Name        string      `json:"name"`
	In          []mesh.Spec `json:"in,omitempty"`
	Out         mesh.Spec   `json:"out"`
	Compute     float64     `json:"compute"`
	Comm        float64     `json:"comm"`
	Collectives []string    `json:"collectives,omitempty"` // the op's own, e.g. "all_reduce axes 1"
	// ReshardIn turns the operands' chosen layouts into In; ReshardOut turns Out into each
	// consumer's chosen In (and into the param's layout for an update).
	ReshardIn  float64 `json:"reshard_in"`
	ReshardOut float64 `json:"reshard_out"`
	Total      float64 `json:"total"`
	Memory     int64   `json:"memory"` // bytes per device of the result
	Chosen     bool    `json:"chosen"`
}

// ForcedPlan is what the ILP finds with one value forced to another candidate.
type ForcedPlan struct {
	Candidate int     `json:"candidate"`
	Fits      bool    `json:"fits"`                 // a plan within the memory budget exists
	MinMemory int64   `json:"min_memory,omitempty"` // when !Fits: the least peak any such plan needs
	StageCost float64 `json:"stage_cost,omitempty"` // when Fits
	// FreeCost is the best stage cost with the candidate forced and no memory budget.
	FreeCost float64 `json:"free_cost"`
	// Changed names the other values whose layout differs from the chosen plan (sorted,
	// at most maxChanged).
	Changed      []string `json:"changed,omitempty"`
	ChangedCount int      `json:"changed_count"`
}

const maxChanged = 8

// errNoStep is returned by explain calls on a Plan that was neither compiled nor read.
var errNoStep = errors.New("explain: the plan has no training step: compile it or read it with ReadPlan")

// ExplainOp says why value name got its sharding: every candidate strategy on its stage's
// logical mesh with its compute, its own collectives and the resharding from its operands'
// chosen layouts and into its consumers' chosen layouts, which one the plan chose, and the
// fact that decided it. When another candidate is locally cheaper, the stage is solved
// again with that candidate forced (with and without the memory budget) to tell a memory
// trade from a neighbour's resharding. A leaf listed by several stages is explained in the
// first, which holds and updates it. An unknown name is an error naming the closest names.
func (p *Plan) ExplainOp(ctx context.Context, name string) (*OpExplanation, error) {
	if p.Step() == nil {
		return nil, errNoStep
	}
	si, vp := p.findValue(name)
	if vp == nil {
		return nil, p.unknownValue(name)
	}
	st, err := p.solveOwnStage(ctx, si)
	if err != nil {
		return nil, err
	}
	v, _ := st.sg.g.Lookup(name)
	e := &OpExplanation{Name: name, Op: vp.Op, Type: st.sg.g.Value(v).Type.String(), Stage: si, Layer: vp.Layer,
		Mesh: st.res.Mesh.String(), StageCost: st.res.Cost.Total, Notes: st.notes}
	cands, err := sharding.CandidatesWith(st.sg.g, st.res.Mesh, sharding.Options{Cluster: &p.Cluster})
	if err != nil {
		return nil, fmt.Errorf("explain: stage %d: %w", si, err)
	}
	if e.Candidates, err = st.price(v, cands[v]); err != nil {
		return nil, fmt.Errorf("explain: %s: %w", name, err)
	}
	e.Chosen = chosenIndex(cands[v], vp, st.res.Choice[v])
	if e.Chosen < 0 {
		return nil, fmt.Errorf("explain: %s: none of its %d candidates is the plan's %q (%s); the plan was made by another autopar",
			name, len(cands[v]), vp.Strategy, vp.Spec)
	}
	e.Candidates[e.Chosen].Chosen = true
	e.Cheapest = cheapest(e.Candidates)
	if err := p.decide(ctx, e, st, v); err != nil {
		return nil, err
	}
	return e, nil
}

// findValue returns the first stage listing name and its entry there.
func (p *Plan) findValue(name string) (int, *ValuePlan) {
	for si := range p.Stages {
		for i := range p.Stages[si].Values {
			if p.Stages[si].Values[i].Name == name {
				return si, &p.Stages[si].Values[i]
			}
		}
	}
	return -1, nil
}

// chosenIndex finds the plan's strategy among the candidates: by name and layouts, else
// the re-solve's choice when it has the plan's layout.
func chosenIndex(cands []sharding.Strategy, vp *ValuePlan, resolved int) int {
	for k := range cands {
		if cands[k].Name == vp.Strategy && cands[k].Out.Equal(vp.Spec) && specsEqual(cands[k].In, vp.In) {
			return k
		}
	}
	if resolved >= 0 && resolved < len(cands) && cands[resolved].Out.Equal(vp.Spec) {
		return resolved
	}
	return -1
}

func specsEqual(a, b []mesh.Spec) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !a[i].Equal(b[i]) {
			return false
		}
	}
	return true
}

// cheapest is the index of the lowest Total, the first on ties.
func cheapest(cs []CandidateCost) int {
	best := 0
	for k := range cs {
		if cs[k].Total < cs[best].Total && !nearlyEqual(cs[k].Total, cs[best].Total) {
			best = k
		}
	}
	return best
}

// nearlyEqual compares costs that are sums of the same terms in different orders.
func nearlyEqual(a, b float64) bool {
	return math.Abs(a-b) <= 1e-9*math.Max(math.Abs(a), math.Abs(b))+1e-15
}

// solvedStage is one stage cut and solved again as compile did, with the layouts the
// explanation prices neighbours against.
type solvedStage struct {
	stage int
	sg    *stageGraph
	res   *sharding.Result
	out   []mesh.Spec   // each value's chosen layout: plan.json's where it lists the value
	in    [][]mesh.Spec // each value's chosen operand layouts, likewise
	notes []string
}

// explainOracle is an oracle set up as compile's was for this plan: the same cluster,
// memory budget and ILP time limit, and a layering rebuilt from the layer of
// every value the plan lists, so that its stage cuts are compile's.
func (p *Plan) explainOracle(ctx context.Context) *oracle {
	of := make([]int, len(p.Step().Values))
	for i := range of {
		of[i] = -1
	}
	for _, s := range p.Stages {
		for _, v := range s.Values {
			if id, ok := p.Step().Lookup(v.Name); ok {
				of[id] = v.Layer
			}
		}
	}
	lay := &passes.Layering{L: len(p.Layers), Of: of}
	o := newOracle(ctx, p.Step(), lay, &p.Cluster, p.ilpTimeLimit(), p.Predicted.DeviceMemory, nil)
	o.iters = p.ilpIterations()
	o.lpOnly = p.LPSolveOnly
	o.canonical, o.leastPlans = true, true
	o.mb = p.Microbatches // as compile weighed the stages
	return o
}

// cutStage cuts stage n's subgraph with the oracle, as compile did.
func (p *Plan) cutStage(o *oracle, n int) (*stageGraph, error) {
	s := &p.Stages[n]
	if s.FirstLayer < 0 || s.LastLayer < s.FirstLayer {
		return nil, fmt.Errorf("explain: stage %d: layers %d-%d in plan.json", n, s.FirstLayer, s.LastLayer)
	}
	sg, err := o.stage(s.FirstLayer, s.LastLayer+1)
	if err != nil {
		return nil, fmt.Errorf("explain: stage %d: %w", n, err)
	}
	if s.ILP.Values != 0 && len(sg.g.Values) != s.ILP.Values {
		return nil, fmt.Errorf("explain: stage %d: its subgraph rebuilds with %d values, plan.json says %d",
			n, len(sg.g.Values), s.ILP.Values)
	}
	return sg, nil
}

// solveOwnStage re-solves stage n on its own submesh and logical mesh.
func (p *Plan) solveOwnStage(ctx context.Context, n int) (*solvedStage, error) {
	o := p.explainOracle(ctx)
	sg, err := p.cutStage(o, n)
	if err != nil {
		return nil, err
	}
	s := &p.Stages[n]
	sol := o.solveStage(sg, s.Submesh, s.Logical)
	switch {
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case !sol.ok:
		return nil, fmt.Errorf("explain: stage %d: %v", n, sol.err)
	case sol.res == nil:
		return nil, fmt.Errorf("explain: stage %d: its weights alone overflow the device memory %d times over; the plan cannot be one compile made",
			n, pruneFactor)
	}
	st := &solvedStage{stage: n, sg: sg, res: sol.res, out: append([]mesh.Spec(nil), sol.res.Specs...),
		in: make([][]mesh.Spec, len(sg.g.Values))}
	for i := range st.in {
		st.in[i] = sol.res.Strategies[i].In
	}
	differ := 0
	for _, v := range s.Values {
		id, ok := sg.g.Lookup(v.Name)
		if !ok {
			continue
		}
		if !st.out[id].Equal(v.Spec) || !specsEqual(st.in[id], v.In) {
			differ++
		}
		st.out[id], st.in[id] = v.Spec, v.In
	}
	if differ > 0 {
		st.notes = append(st.notes, fmt.Sprintf("solving stage %d again gave %d values another layout than plan.json; "+
			"neighbours are priced with plan.json's", n, differ))
	}
	return st, nil
}

// price costs every candidate of v against the chosen layouts of its neighbours.
func (st *solvedStage) price(v ir.ValueID, cands []sharding.Strategy) ([]CandidateCost, error) {
	g, lm := st.sg.g, st.res.Mesh
	val := g.Value(v)
	users := g.Users()[v]
	out := make([]CandidateCost, len(cands))
	for k := range cands {
		s := &cands[k]
		c := CandidateCost{Index: k, Name: s.Name, In: s.In, Out: s.Out, Compute: s.Compute, Comm: s.Comm, Memory: s.Memory}
		for _, col := range s.Collectives {
			c.Collectives = append(c.Collectives, fmt.Sprintf("%s axes %s", col.Kind, col.Axes.Digits()))
		}
		for i, a := range val.Args {
			t, err := reshardTime(lm, g.Value(a).Type, st.out[a], s.In[i])
			if err != nil {
				return nil, err
			}
			c.ReshardIn += t
		}
		for _, u := range dedup(users) {
			for i, a := range g.Value(u).Args {
				if a != v || i >= len(st.in[u]) {
					continue
				}
				t, err := reshardTime(lm, val.Type, s.Out, st.in[u][i])
				if err != nil {
					return nil, err
				}
				c.ReshardOut += t
			}
		}
		for _, up := range g.Updates {
			from, to := up.Value, up.Target
			var t float64
			var err error
			switch {
			case from == v:
				t, err = reshardTime(lm, val.Type, s.Out, st.out[to])
			case to == v:
				t, err = reshardTime(lm, val.Type, st.out[from], s.Out)
			}
			if err != nil {
				return nil, err
			}
			c.ReshardOut += t
		}
		c.Total = c.Compute + c.Comm + c.ReshardIn + c.ReshardOut
		out[k] = c
	}
	return out, nil
}

func dedup(ids []ir.ValueID) []ir.ValueID {
	var out []ir.ValueID
	for i, id := range ids {
		if i == 0 || id != ids[i-1] {
			out = append(out, id)
		}
	}
	return out
}

func reshardTime(lm *mesh.LogicalMesh, t ir.Type, from, to mesh.Spec) (float64, error) {
	r, err := mesh.ReshardCost(lm, t.Shape, t.DType.Size(), from, to)
	if err != nil {
		return 0, fmt.Errorf("resharding %s from %s to %s: %w", t, from, to, err)
	}
	return r.Time, nil
}

// decide fills Why and Reason. When the chosen candidate is not the locally cheapest, the
// stage is solved with the cheapest forced, and the facts of that solve decide.
func (p *Plan) decide(ctx context.Context, e *OpExplanation, st *solvedStage, v ir.ValueID) error {
	free, err := p.solveWith(ctx, st, nil, 1<<62)
	if err != nil {
		return fmt.Errorf("explain: stage %d without a memory budget: %w", st.stage, err)
	}
	e.UnbudgetedCost, e.UnbudgetedSpec = free.Cost.Total, free.Specs[v]
	ch, ce := &e.Candidates[e.Chosen], &e.Candidates[e.Cheapest]
	budget := units.Bytes(p.Predicted.DeviceMemory)
	if e.Chosen == e.Cheapest || nearlyEqual(ch.Total, ce.Total) {
		e.Why = WhyCheapest
		e.Reason = fmt.Sprintf("%q is the cheapest of %d candidates given its neighbours' layouts (%s)",
			ch.Name, len(e.Candidates), units.Seconds(ch.Total))
		if cheaper(free.Cost.Total, e.StageCost) && !free.Specs[v].Equal(ch.Out) {
			e.Why = WhyMemory
			e.Reason += fmt.Sprintf(", but those layouts are the memory budget's: without the budget of %s the stage would cost %s instead of %s and %s would be laid out %s, not %s",
				budget, units.Seconds(free.Cost.Total), units.Seconds(e.StageCost), e.Name, free.Specs[v], ch.Out)
		}
		return nil
	}
	f, err := p.force(ctx, st, v, e.Cheapest)
	if err != nil {
		return err
	}
	e.Forced = f
	gap := units.Seconds(ch.Total - ce.Total)
	switch {
	case !f.Fits:
		e.Why = WhyMemory
		e.Reason = fmt.Sprintf("%q would be %s cheaper here, but the ILP traded it for memory: with it the stage needs at least %s per device, over the budget of %s",
			ce.Name, gap, units.Bytes(f.MinMemory), budget)
	case cheaper(e.StageCost, f.StageCost) && cheaper(f.FreeCost, e.StageCost):
		e.Why = WhyMemory
		e.Reason = fmt.Sprintf("%q would be %s cheaper here, but the ILP traded it for memory: the best plan with it costs the stage %s within the budget of %s, %s without a budget, against %s chosen",
			ce.Name, gap, units.Seconds(f.StageCost), budget, units.Seconds(f.FreeCost), units.Seconds(e.StageCost))
	case cheaper(e.StageCost, f.StageCost):
		e.Why = WhyNeighbours
		e.Reason = fmt.Sprintf("%q would be %s cheaper here, but the ILP traded it for its neighbours' resharding: the best plan with it costs the stage %s against %s, changing the layout of %d other values (%s)",
			ce.Name, gap, units.Seconds(f.StageCost), units.Seconds(e.StageCost), f.ChangedCount, strings.Join(f.Changed, ", "))
	default:
		e.Why = WhyTied
		e.Reason = fmt.Sprintf("%q would be %s cheaper here and the stage with it forced costs %s, no more than the %s chosen: the ILP's simplifications (followers merged into their leader, identical layers solved once) tied this value to another's choice",
			ce.Name, gap, units.Seconds(f.StageCost), units.Seconds(e.StageCost))
	}
	return nil
}

// cheaper reports whether cost a is below b by more than rounding.
func cheaper(a, b float64) bool { return a < b && !nearlyEqual(a, b) }

// solveWith solves stage st as compile did, with force pinned and the given memory budget.
func (p *Plan) solveWith(ctx context.Context, st *solvedStage, force map[ir.ValueID]int, budget int64) (*sharding.Result, error) {
	lm := st.res.Mesh
	opts := sharding.Options{Cluster: &p.Cluster, MemoryBudget: budget, TimeLimit: p.ilpTimeLimit(), Iterations: max(p.ilpIterations(), 0), LPSolveOnly: p.LPSolveOnly,
		SolveLayersOnce: true, BlockKeys: st.sg.keys, Force: force,
		Microbatches: st.sg.mb, Update: st.sg.once, Accumulated: st.sg.acc} // weighed as compile weighed it (B·t + u)
	return st.sg.solve(ctx, lm, opts)
}

// force solves stage st with value v pinned to candidate k, within the memory budget and
// without one.
func (p *Plan) force(ctx context.Context, st *solvedStage, v ir.ValueID, k int) (*ForcedPlan, error) {
	force := map[ir.ValueID]int{v: k}
	f := &ForcedPlan{Candidate: k}
	res, err := p.solveWith(ctx, st, force, p.Predicted.DeviceMemory)
	var me *sharding.MemoryError
	switch {
	case errors.As(err, &me):
		f.MinMemory = me.Minimum
	case err != nil:
		return nil, fmt.Errorf("explain: stage %d with %s forced: %w", st.stage, st.sg.g.Value(v).Name, err)
	default:
		f.Fits, f.StageCost = true, res.Cost.Total
		f.Changed, f.ChangedCount = changedValues(st, res, v)
	}
	free, err := p.solveWith(ctx, st, force, 1<<62)
	if err != nil {
		return nil, fmt.Errorf("explain: stage %d with %s forced, no memory budget: %w", st.stage, st.sg.g.Value(v).Name, err)
	}
	f.FreeCost = free.Cost.Total
	if !f.Fits {
		f.Changed, f.ChangedCount = changedValues(st, free, v)
	}
	return f, nil
}

// changedValues names the values other than v whose layout res changes, sorted.
func changedValues(st *solvedStage, res *sharding.Result, v ir.ValueID) ([]string, int) {
	var names []string
	for i := range st.out {
		if ir.ValueID(i) != v && !res.Specs[i].Equal(st.out[i]) {
			names = append(names, st.sg.g.Values[i].Name)
		}
	}
	sort.Strings(names)
	n := len(names)
	if n > maxChanged {
		names = append(names[:maxChanged:maxChanged], "…")
	}
	return names, n
}

// unknownValue is the error for a name no stage lists: the closest names by edit
// distance, and how many exist.
func (p *Plan) unknownValue(name string) error {
	names := dedupStrings(p.StageNames())
	near := textdist.Closest(name, names, 5)
	msg := fmt.Sprintf("explain: no value %q in the plan of %s (%d values)", name, p.Model, len(names))
	if len(near) > 0 {
		msg += "; closest: " + strings.Join(near, ", ")
	}
	return errors.New(msg)
}

func dedupStrings(sorted []string) []string {
	var out []string
	for i, s := range sorted {
		if i == 0 || s != sorted[i-1] {
			out = append(out, s)
		}
	}
	return out
}

// StageExplanation is what the stage DP weighed for one stage: its layer range priced on
// every submesh and logical mesh of the cluster.
type StageExplanation struct {
	Stage      int    `json:"stage"`
	FirstLayer int    `json:"first_layer"`
	LastLayer  int    `json:"last_layer"`
	Ops        int    `json:"ops"` // non-leaf values of the stage's layers
	InFlight   int    `json:"in_flight"`
	Capacity   int64  `json:"capacity"` // device memory the plan was made for
	Schedule   string `json:"schedule"`
	// StepTime is the plan's predicted step time, Σ (t_i + r_i) + (B−1)·max (t_j + r_j) +
	// u_0 + s_0 (r: a stage's receives per micro-batch; u_0, s_0: the first stage's
	// once-per-step part and receives; plan.Prediction).
	StepTime float64 `json:"step_time"`
	// Alternatives are in the DP's tie-break order: submeshes smallest first, then dp
	// ascending.
	Alternatives []StageAlternative `json:"alternatives"`
	Chosen       int                `json:"chosen"` // index into Alternatives
}

// StageAlternative is the stage's layer range on one (submesh, logical mesh).
type StageAlternative struct {
	Submesh mesh.Submesh      `json:"submesh"`
	Logical mesh.LogicalShape `json:"logical_mesh"`
	Devices int               `json:"devices"`
	OK      bool              `json:"ok"`              // a sharding exists
	Err     string            `json:"error,omitempty"` // why not, when !OK
	Time    float64           `json:"time"`            // seconds per micro-batch, forward + backward
	Step    float64           `json:"step_part"`       // seconds once per step: gradient sync, update
	Cost    sharding.Cost     `json:"cost"`            // Total (the ILP's objective) = Time + Step
	// Pruned: not solved, as compile did not solve it, because its weights alone, spread
	// evenly over its devices, overflow the device memory several times over. Time and
	// WeightBytes are then lower bounds and Cost is zero.
	Pruned bool `json:"pruned,omitempty"`
	// WeightBytes are params, their gradients and optimizer state; ActBytes one
	// micro-batch's activations (a recomputing stage's: its inputs), RecomputeBytes the
	// recomputed micro-batch's; MemoryBytes = WeightBytes + InFlight·ActBytes +
	// RecomputeBytes.
	WeightBytes    int64 `json:"weight_bytes"`
	ActBytes       int64 `json:"activation_bytes"`
	RecomputeBytes int64 `json:"recompute_bytes,omitempty"`
	MemoryBytes    int64 `json:"memory_bytes"`
	Fits           bool  `json:"fits"`
	// StepTime is the plan's step time with this stage's time replaced, for alternatives on
	// as many devices as the chosen one (the others would not tile the cluster with the
	// other stages as they are); 0 otherwise.
	StepTime float64 `json:"step_time,omitempty"`
	Chosen   bool    `json:"chosen"`
}

// ExplainStage prices stage n's layer range on every submesh (dp.Submeshes) and logical
// mesh (dp.LogicalShapes) of the cluster, one sharding solve each as compile made them,
// and marks the plan's choice. Like compile, it leaves out the meshes (n, 1) inside a host,
// which price exactly as (1, n), unless the plan chose one. An unknown stage is an error listing the stages.
func (p *Plan) ExplainStage(ctx context.Context, n int) (*StageExplanation, error) {
	if p.Step() == nil {
		return nil, errNoStep
	}
	if n < 0 || n >= len(p.Stages) {
		return nil, p.unknownStage(n)
	}
	s := &p.Stages[n]
	o := p.explainOracle(ctx)
	sg, err := p.cutStage(o, n)
	if err != nil {
		return nil, err
	}
	e := &StageExplanation{Stage: n, FirstLayer: s.FirstLayer, LastLayer: s.LastLayer, Ops: len(sg.ids), InFlight: s.InFlight,
		Capacity: p.Predicted.DeviceMemory, Schedule: p.Schedule, StepTime: p.stepTime(n, s.Time, s.StepTime), Chosen: -1}
	for _, sub := range dp.Submeshes(dp.ClusterOf(&p.Cluster)) {
		for _, l := range dp.LogicalShapes(sub) {
			chosen := sub == s.Submesh && l == s.Logical
			if o.mirrored(sub, l) && !chosen {
				continue // prices exactly as its mirror (1, n), as compile knows
			}
			a := p.alternative(o, sg, sub, l, n)
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			if chosen {
				a.Chosen, e.Chosen = true, len(e.Alternatives)
			}
			e.Alternatives = append(e.Alternatives, a)
		}
	}
	if e.Chosen < 0 {
		return nil, fmt.Errorf("explain: stage %d: its submesh %s is not one of the cluster's", n, s.Submesh)
	}
	return e, nil
}

// alternative prices stage n's layers on (sub, l) as compile's oracle did.
func (p *Plan) alternative(o *oracle, sg *stageGraph, sub mesh.Submesh, l mesh.LogicalShape, n int) StageAlternative {
	s := &p.Stages[n]
	sol := o.solveStage(sg, sub, l)
	a := StageAlternative{Submesh: sub, Logical: l,
		Devices: sub.NumDevices(), OK: sol.ok}
	if !sol.ok {
		a.Err = fmt.Sprint(sol.err)
		return a
	}
	cost := sol.chosen(choice(s.Recompute, s.RecomputeLayers)) // priced as the stage runs
	a.Time, a.Step = cost.Time, cost.Step
	if sol.res != nil {
		a.Cost = sol.res.Cost
	} else {
		a.Pruned = true
	}
	a.WeightBytes, a.ActBytes, a.RecomputeBytes = int64(cost.WeightBytes), int64(cost.ActBytes), int64(cost.OnceBytes)
	a.MemoryBytes = int64(cost.Memory(s.InFlight))
	a.Fits = !a.Pruned && a.MemoryBytes <= p.Predicted.DeviceMemory
	if a.Devices == len(s.Devices) {
		a.StepTime = p.stepTime(n, a.Time, a.Step)
	}
	return a
}

// stepTime is Σ (t_i + r_i) + (B−1)·max (t_j + r_j) + u_0 + s_0 over the plan's stages
// (plan.Prediction), with stage n taking micro-batch time t and step part u. Each stage
// keeps its receives r_i (RecvTime): on as many devices, another logical mesh receives the
// same bytes as far as the search can tell (oracle.Receives does not depend on it).
func (p *Plan) stepTime(n int, t, u float64) float64 {
	var sum, slow float64
	first := p.Stages[0].StepTime
	if n == 0 {
		first = u
	}
	for i, s := range p.Stages {
		ti := s.Time
		if i == n {
			ti = t
		}
		sum += ti + s.RecvTime
		slow = max(slow, ti+s.RecvTime)
	}
	return sum + float64(p.Microbatches-1)*slow + first + p.Stages[0].StepRecvTime
}

func (p *Plan) unknownStage(n int) error {
	var b strings.Builder
	for i, s := range p.Stages {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%d (layers %d-%d)", i, s.FirstLayer, s.LastLayer)
	}
	return fmt.Errorf("explain: no stage %d; the plan has %d stages: %s", n, len(p.Stages), b.String())
}
