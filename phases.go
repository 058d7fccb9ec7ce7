package autopar

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/autopar/autopar/dp"
	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/mesh"
	"github.com/autopar/autopar/passes"
	"github.com/autopar/autopar/program"
	"github.com/autopar/autopar/units"
)

// Compilation is the state the phases of Phases act on. Compile fills the inputs, then
// each phase reads what the phases before it set and sets its own field; a field is nil
// until its phase has run. There is one Compilation per micro-batch count tried: the
// phases of scope PerMicrobatches run on each, those of scope AllMicrobatches on all of
// them at once, and those of scope Chosen on the one whose plan is fastest.
type Compilation struct {
	// The inputs, set before the first phase.
	Model        *ir.Graph        // the forward graph, whole batch; never modified
	Cluster      *mesh.Cluster    // validated
	Options      Options          // with defaults filled in
	Schedule     program.Schedule // Options.Schedule, parsed
	Batch        int              // the model's batch
	Microbatches int              // B; 0 in the compilation the ForwardGraph phases run on

	MicroBatch *ir.Graph          // rebatch: the forward graph of one micro-batch
	Compute    *ir.Graph          // precision: MicroBatch in the step's compute dtypes
	Backward   *ir.Graph          // autodiff: MicroBatch with its backward ops, gradients as extra outputs
	Step       *ir.Graph          // optimizer: the training step of one micro-batch
	Layering   *passes.Layering   // cluster: the layer of every value of Step (search may take moved instead)
	Search     *dp.Result         // search: stages, submeshes and logical meshes (the DP's answer)
	Plan       *Plan              // search: the plan, with the sharding of every value (the ILPs')
	Programs   []*program.Program // lower: one program per device

	// moved is the cluster phase's other layering of Step, a param's adjoint part with its
	// reader (passes.ClusterLayerings; nil: none differs), which the search takes in place
	// of Layering where its seed prices it faster (chooseLayering).
	moved *passes.Layering

	ctx context.Context
	// shared holds the search's solutions for every micro-batch count (the copies of the
	// base compilation share it): a layer whose shape repeats is solved once (oracle.go).
	shared *shared
}

// Scope says which compilations a phase runs on. Scopes never decrease along Phases.
type Scope int

const (
	// ForwardGraph phases run once, on the forward graph, before the micro-batch counts.
	ForwardGraph Scope = iota
	// PerMicrobatches phases run once per micro-batch count tried.
	PerMicrobatches
	// AllMicrobatches phases run once, on the compilations of every micro-batch count
	// whose PerMicrobatches phases succeeded (Phase.RunAll): the search, which pools the
	// counts' sharding ILPs and skips the counts that cannot win.
	AllMicrobatches
	// Chosen phases run on the compilation whose plan has the shortest step time.
	Chosen
)

// Phase is one row of Phases.
type Phase struct {
	Name string
	// Doc is its line in `autopar compile --help`.
	Doc   string
	Scope Scope
	// Requires names phases that must come earlier in Phases; checked when the package loads.
	Requires []string
	// Run does the phase's work on s, setting the field it owns; nil in an AllMicrobatches
	// phase.
	Run func(s *Compilation) error
	// RunAll is an AllMicrobatches phase's work, on every count's compilation at once. It
	// returns one error per compilation: nil where the phase succeeded, errSkipped where
	// it dropped the count as unable to win; the later phases see only the others.
	RunAll func(ss []*Compilation) []error
	// Dump writes what the phase produced as text (`autopar compile --dump NAME`): a graph
	// in .ir syntax, the layering, the stage table or the programs.
	Dump func(w io.Writer, s *Compilation) error
	// Verify checks what the phase produced; it runs after the phase in tests and under
	// `autopar compile --check`.
	Verify func(s *Compilation) error
}

// Phases is the compiler: the one ordered list of phases Compile runs. Nothing runs
// outside it; a new phase is a row here, placed after the phases it requires.
var Phases = []Phase{
	{Name: "verify", Doc: "check the forward graph's invariants (types, names, order)", Scope: ForwardGraph,
		Run: verifyGraph(forward), Dump: dumpGraph(forward), Verify: func(*Compilation) error { return nil }},
	{Name: "rebatch", Doc: "the forward graph of one micro-batch, for each micro-batch count B tried (this phase to search run per B)", Scope: PerMicrobatches,
		Requires: []string{"verify"}, Run: runRebatch, Dump: dumpGraph(microBatch), Verify: verifyGraph(microBatch)},
	{Name: "precision", Doc: "the micro-batch's forward in the --precision compute dtype (float params declared in it, inputs cast on entry)",
		Scope: PerMicrobatches, Requires: []string{"rebatch"}, Run: runPrecision, Dump: dumpGraph(compute), Verify: verifyGraph(compute)},
	{Name: "autodiff", Doc: "append the backward ops: grad.<param> for every param of the loss (first output)",
		Scope: PerMicrobatches, Requires: []string{"precision"}, Run: runAutodiff, Dump: dumpGraph(backward), Verify: verifyGraph(backward)},
	{Name: "optimizer", Doc: "append the optimizer update of every param and its state: the training step",
		Scope: PerMicrobatches, Requires: []string{"autodiff"}, Run: runOptimizer, Dump: dumpGraph(step), Verify: verifyGraph(step)},
	{Name: "cluster", Doc: "group the step's ops into layers of balanced FLOPs (Alpa's layer DP)",
		Scope: PerMicrobatches, Requires: []string{"optimizer"}, Run: runCluster, Dump: dumpLayering, Verify: verifyLayering},
	{Name: "search", Doc: "stages, submeshes and logical meshes (DP) priced by the sharding ILPs: the plan (every B at once, in the order of its optimistic bound; a layer or a B whose bound loses is never solved)",
		Scope: AllMicrobatches, Requires: []string{"cluster"}, RunAll: searchAll, Dump: dumpStages, Verify: verifyPlan},
	{Name: "lower", Doc: "one program per device for the fastest plan (codegen)", Scope: Chosen,
		Requires: []string{"search"}, Run: runLower, Dump: dumpPrograms, Verify: verifyPrograms},
}

func init() {
	if err := checkPhases(Phases); err != nil {
		panic("autopar: " + err.Error())
	}
}

// checkPhases enforces the table's constraints: every row complete, names unique, every
// required phase earlier, scopes in order.
func checkPhases(t []Phase) error {
	seen := map[string]bool{}
	for i, p := range t {
		if p.Name == "" || (p.Run == nil) == (p.Scope != AllMicrobatches) || (p.RunAll == nil) == (p.Scope == AllMicrobatches) ||
			p.Dump == nil || p.Verify == nil {
			return fmt.Errorf("phase %q lacks a name, a function (Run, or RunAll in scope AllMicrobatches), a dump or a verifier", p.Name)
		}
		if seen[p.Name] {
			return fmt.Errorf("phase %s is listed twice", p.Name)
		}
		for _, r := range p.Requires {
			if !seen[r] {
				return fmt.Errorf("phase %s requires %s, which does not come before it", p.Name, r)
			}
		}
		if i > 0 && p.Scope < t[i-1].Scope {
			return fmt.Errorf("phase %s runs on fewer compilations than %s before it", t[i-1].Name, p.Name)
		}
		seen[p.Name] = true
	}
	return nil
}

// PhaseNames lists the phases in order.
func PhaseNames() []string {
	out := make([]string, len(Phases))
	for i, p := range Phases {
		out[i] = p.Name
	}
	return out
}

// LookupPhase returns the row of the named phase.
func LookupPhase(name string) (*Phase, bool) {
	for i := range Phases {
		if Phases[i].Name == name {
			return &Phases[i], true
		}
	}
	return nil, false
}

// PhaseConfig steers Run.
type PhaseConfig struct {
	// UpTo is the last phase to run; "" runs them all.
	UpTo string
	// Check runs every phase's verifier after it (tests and `--check`).
	Check bool
	// After, when set, is called after each phase with the compilation it acted on and the
	// time it took: what `--dump` and `--time` hang on. It must not modify s. An
	// AllMicrobatches phase calls it for each compilation it did not drop, the whole
	// phase's time with the first and 0 with the others.
	After func(p *Phase, s *Compilation, took time.Duration) error
}

// PhaseError is a phase's verifier rejecting what the phase produced: a bug in the phase.
type PhaseError struct {
	Phase string
	Err   error
}

func (e *PhaseError) Error() string { return e.Phase + ": left an invalid result: " + e.Err.Error() }

func (e *PhaseError) Unwrap() error { return e.Err }

// checkEveryPhase is set by the package's tests (TestMain): every Compile then verifies
// between phases.
var checkEveryPhase = false

// Run runs Phases on forward graph g for cluster c, as Compile does, up to and including
// cfg.UpTo. The ForwardGraph phases run once; the PerMicrobatches phases once per
// micro-batch count tried (a count whose phases fail is skipped, as in Compile); the
// AllMicrobatches phases once on all of those counts (which may drop some); the Chosen
// phases on the compilation whose plan has the shortest step time. Run returns that
// compilation, or, when UpTo stops before any plan exists, the first count's. Its errors
// are Compile's.
func Run(ctx context.Context, g *ir.Graph, c *mesh.Cluster, opts Options, cfg *PhaseConfig) (*Compilation, error) {
	if cfg == nil {
		cfg = &PhaseConfig{}
	}
	last := len(Phases) - 1
	if cfg.UpTo != "" {
		if last = phaseIndex(cfg.UpTo); last < 0 {
			return nil, fmt.Errorf("unknown phase %q, want one of %s", cfg.UpTo, strings.Join(PhaseNames(), ", "))
		}
	}
	base, counts, err := prepare(ctx, g, c, opts)
	if err != nil {
		return nil, err
	}
	r := &runner{table: Phases, cfg: cfg, last: last}
	if err := r.run(base, ForwardGraph); err != nil {
		return nil, err
	}
	if r.done {
		return base, nil
	}
	var ok []*Compilation
	var why error // when no count gives a plan: the memory error that needs least, or the first
	for _, b := range counts {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		s := *base
		s.Microbatches = b
		if err := r.run(&s, PerMicrobatches); err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			why = worse(why, err)
			continue
		}
		ok = append(ok, &s)
	}
	ok, why, err = r.runAll(ctx, ok, why)
	if err != nil {
		return nil, err
	}
	var best, first *Compilation
	for _, s := range ok {
		if first == nil {
			first = s
		}
		if s.Plan != nil && (best == nil || s.Plan.Predicted.StepTime < best.Plan.Predicted.StepTime) {
			best = s
		}
	}
	switch {
	case first == nil:
		var me *dp.MemoryError
		if opts.Remat == RematNone && errors.As(why, &me) {
			return nil, fmt.Errorf("%w (with --remat none; recomputing activations, --remat auto or full, may need less)", why)
		}
		return nil, why
	case best == nil:
		return first, nil
	}
	if err := r.run(best, Chosen); err != nil {
		return nil, err
	}
	return best, nil
}

func phaseIndex(name string) int {
	for i := range Phases {
		if Phases[i].Name == name {
			return i
		}
	}
	return -1
}

// runner runs the rows of one scope of a table on a compilation, stopping after row last.
type runner struct {
	table []Phase
	cfg   *PhaseConfig
	last  int
	done  bool // row last has run
}

// runAll runs the AllMicrobatches rows on the compilations ss, stopping after row last, and
// returns those no row dropped, with why worsened by the errors of the counts that failed.
// Its error is the context's or a verifier's.
func (r *runner) runAll(ctx context.Context, ss []*Compilation, why error) ([]*Compilation, error, error) {
	for i := range r.table {
		p := &r.table[i]
		if p.Scope != AllMicrobatches || i > r.last || r.done || len(ss) == 0 {
			continue
		}
		if err := ctx.Err(); err != nil {
			return nil, why, err
		}
		start := time.Now()
		errs := p.RunAll(ss)
		took := time.Since(start)
		if err := ctx.Err(); err != nil {
			return nil, why, err
		}
		var kept []*Compilation
		for j, s := range ss {
			if errs[j] != nil {
				if !errors.Is(errs[j], errSkipped) {
					why = worse(why, errs[j])
				}
				continue
			}
			if r.cfg.Check {
				if err := p.Verify(s); err != nil {
					return nil, why, &PhaseError{Phase: p.Name, Err: err}
				}
			}
			if r.cfg.After != nil {
				if err := r.cfg.After(p, s, took); err != nil {
					return nil, why, err
				}
			}
			took = 0
			kept = append(kept, s)
		}
		ss = kept
		if i == r.last {
			r.done = true
		}
	}
	return ss, why, nil
}

func (r *runner) run(s *Compilation, scope Scope) error {
	for i := range r.table {
		p := &r.table[i]
		if p.Scope != scope || i > r.last {
			continue
		}
		if err := s.ctx.Err(); err != nil {
			return err
		}
		start := time.Now()
		if err := p.Run(s); err != nil {
			return err
		}
		took := time.Since(start)
		if r.cfg.Check {
			if err := p.Verify(s); err != nil {
				return &PhaseError{Phase: p.Name, Err: err}
			}
		}
		if r.cfg.After != nil {
			if err := r.cfg.After(p, s, took); err != nil {
				return err
			}
		}
		if i == r.last {
			r.done = true
		}
	}
	return nil
}

func runRebatch(s *Compilation) error {
	f, err := forwardFor(s.Model, s.Options.BatchNorm, s.Microbatches)
	if err != nil {
		return err
	}
	s.MicroBatch, err = passes.Rebatch(f, s.Batch/s.Microbatches)
	return err
}

func runPrecision(s *Compilation) (err error) {
	s.Compute, err = passes.ApplyPrecision(s.MicroBatch, s.Options.Optimizer)
	return err
}

func runAutodiff(s *Compilation) (err error) {
	s.Backward, err = passes.Autodiff(s.Compute, s.Options.Optimizer.LossScale)
	return err
}

func runOptimizer(s *Compilation) (err error) {
	s.Step, err = passes.ApplyOptimizer(s.Backward, s.Options.Optimizer)
	return err
}

func runCluster(s *Compilation) (err error) {
	layers := s.Options.Layers
	if layers == 0 {
		layers = DefaultLayers(s.Step, s.Cluster.Devices())
	}
	s.Layering, s.moved, err = passes.ClusterLayerings(s.Step, passes.ClusterOptions{Layers: layers})
	return err
}

// MaxDefaultLayers caps the automatic layer count (DefaultLayers).
const MaxDefaultLayers = 8

// DefaultLayers is the layer count Compile clusters step g into when Options.Layers is 0,
// for a cluster of the given devices: at least one layer per device, so that every device
// can run a stage of its own, and at least one layer per repeated block the model marks
// (ir.Value.Block), so that a stage recomputing layer by layer has the block boundaries to
// keep, as Alpa's benchmarks give each model a fixed number of layers whatever the GPU
// count; both up to MaxDefaultLayers, as more layers than that buy little balance while
// the DP grows with L² (identical layers are solved once, so more of them cost little
// else). ClusterLayers gives fewer where the step has fewer forward ops.
func DefaultLayers(g *ir.Graph, devices int) int {
	blocks := map[ir.Block]bool{}
	for i := range g.Values {
		if b := g.Values[i].Block; b != ir.NoBlock && len(blocks) < MaxDefaultLayers {
			blocks[b] = true
		}
	}
	return min(MaxDefaultLayers, max(1, devices, len(blocks)))
}

func runLower(s *Compilation) (err error) {
	s.Programs, err = s.Plan.Programs()
	return err
}

func forward(s *Compilation) *ir.Graph    { return s.Model }
func microBatch(s *Compilation) *ir.Graph { return s.MicroBatch }
func compute(s *Compilation) *ir.Graph    { return s.Compute }
func backward(s *Compilation) *ir.Graph   { return s.Backward }
func step(s *Compilation) *ir.Graph       { return s.Step }

func dumpGraph(of func(*Compilation) *ir.Graph) func(io.Writer, *Compilation) error {
	return func(w io.Writer, s *Compilation) error { return ir.Print(w, of(s)) }
}

func verifyGraph(of func(*Compilation) *ir.Graph) func(*Compilation) error {
	return func(s *Compilation) error { return ir.Verify(of(s)) }
}

// dumpLayering prints one line per layer (its FLOPs, the activation bytes it receives and
// its value count), then every value of the step with its layer, in step order.
func dumpLayering(w io.Writer, s *Compilation) error {
	lay := s.Layering
	fmt.Fprintf(w, "# %d layers of %s, imbalance δ=%g\n", lay.L, s.Step.Name, lay.Imbalance)
	count := make([]int, lay.L)
	for _, l := range lay.Of {
		count[l]++
	}
	for l := range lay.L {
		fmt.Fprintf(w, "layer %d: %s, in %s, %d values\n", l, units.FLOPs(lay.FLOPs[l]), units.Bytes(lay.InBytes[l]), count[l])
	}
	for i := range s.Step.Values {
		if _, err := fmt.Fprintf(w, "%s %d\n", s.Step.Values[i].Name, lay.Of[i]); err != nil {
			return err
		}
	}
	return nil
}

// verifyLayering checks the layering covers the step: a layer in [0, L) for every value,
// no layer empty, and one FLOPs and bytes entry per layer.
func verifyLayering(s *Compilation) error {
	lay := s.Layering
	if lay.L < 1 || len(lay.FLOPs) != lay.L || len(lay.InBytes) != lay.L || len(lay.Of) != len(s.Step.Values) {
		return fmt.Errorf("%d layers with %d FLOPs and %d byte counts, %d of %d values placed",
			lay.L, len(lay.FLOPs), len(lay.InBytes), len(lay.Of), len(s.Step.Values))
	}
	used := make([]bool, lay.L)
	for i, l := range lay.Of {
		if l < 0 || l >= lay.L {
			return fmt.Errorf("value %s is in layer %d of %d", s.Step.Values[i].Name, l, lay.L)
		}
		used[l] = true
	}
	for l, u := range used {
		if !u {
			return fmt.Errorf("layer %d of %d holds no value", l, lay.L)
		}
	}
	return nil
}

// dumpStages prints the plan's stage table: what the search chose and what it predicts.
func dumpStages(w io.Writer, s *Compilation) error {
	p := s.Plan
	fmt.Fprintf(w, "# %d micro-batches (%s): step time %s, %d layers, %d sharding ILPs solved\n",
		p.Microbatches, p.Schedule, units.Seconds(p.Predicted.StepTime), len(p.Layers), p.Predicted.Solves)
	for i, st := range p.Stages {
		if _, err := fmt.Fprintf(w, "stage %d: layers %d-%d, submesh %s, logical mesh %dx%d, devices %v, %s per micro-batch, %s per device, %d values\n",
			i, st.FirstLayer, st.LastLayer, st.Submesh, st.Logical[0], st.Logical[1], st.Devices, units.Seconds(st.Time),
			units.Bytes(st.MemoryBytes), len(st.Values)); err != nil {
			return err
		}
	}
	return nil
}

// verifyPlan checks the plan as ReadPlan checks a plan.json (the stages tile the layers
// on disjoint devices, numbers finite, layouts fit) and codegen accepts every stage and
// strategy (plan.Plan.Check).
func verifyPlan(s *Compilation) error {
	return s.Plan.Check()
}

func dumpPrograms(w io.Writer, s *Compilation) error {
	for _, p := range s.Programs {
		if _, err := io.WriteString(w, p.String()); err != nil {
			return err
		}
	}
	return nil
}

// verifyPrograms checks one program per device of the cluster, each valid.
func verifyPrograms(s *Compilation) error {
	if len(s.Programs) != s.Cluster.Devices() {
		return fmt.Errorf("%d programs for %d devices", len(s.Programs), s.Cluster.Devices())
	}
	for _, p := range s.Programs {
		if err := p.Validate(); err != nil {
			return err
		}
	}
	return nil
}
