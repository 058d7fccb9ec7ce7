package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/autopar/autopar"
	"github.com/autopar/autopar/internal/gcpolicy"
	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/passes"
	"github.com/autopar/autopar/units"
)

type compileFlags struct {
	cluster, microbatches, schedule, memory, plan, out, emit string
	search                                                   string
	optimizer, dump, remat, precision, batchNorm             string
	batch, layers, microbatchSize                            int
	lr, lossScale                                            float64
	timePasses, checkPhases, lpSolveOnly                     bool
	timeLimit                                                time.Duration
	ilpIterations                                            int64
}

func newCompileCmd() *cobra.Command {
	var f compileFlags
	cmd := &cobra.Command{
		Use:   "compile MODEL.ir --cluster SPEC [-o DIR]",
		Short: "plan data, tensor and pipeline parallelism for a model on a cluster",
		Long: `Builds the training step of a forward graph, clusters it into layers, and searches
pipeline stages, submeshes, logical meshes and the sharding of every op (Alpa's DP over the
sharding ILP). Prints the plan's summary and writes DIR/plan.json; --emit programs also
writes one program per device under DIR/programs, as text (deviceN.txt) and in the stable
serialized form (deviceN.json).

DIR belongs to autopar: it is replaced as a whole (written beside it, then renamed into
place), so an interrupted compile leaves the old DIR and no stale files remain. DIR must be
absent, empty, or hold only plan.json and programs/; anything else there is refused.

The compiler is a table of phases, run in this order (--dump PHASE prints what one
produced and stops, --time times each, --check verifies after each):

` + phaseList(),
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			defer gcpolicy.ForSearch()()
			return runCompile(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), args[0], f)
		},
	}
	fl := cmd.Flags()
	addPlanFlags(fl, &f)
	fl.Float64Var(&f.lr, "lr", 0, "learning rate (default 0.1 for sgd, 0.01 for adam)")
	fl.StringVarP(&f.out, "output", "o", "", "write plan.json (and programs) into `DIR`")
	fl.StringVar(&f.emit, "emit", "", "also write `programs`: one text program per device")
	fl.StringVar(&f.dump, "dump", "", "print what `PHASE` ("+strings.Join(autopar.PhaseNames(), ", ")+") produced and stop")
	fl.BoolVar(&f.timePasses, "time", false, "print the time each phase of the compiler takes, on stderr")
	fl.BoolVar(&f.checkPhases, "check", false, "run each phase's verifier after it")
	_ = cmd.MarkFlagRequired("cluster")
	return cmd
}

// phaseList lists the compiler's phases with their docs, one a line.
func phaseList() string {
	var b strings.Builder
	for _, p := range autopar.Phases {
		fmt.Fprintf(&b, "  %-10s %s\n", p.Name, p.Doc)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// addPlanFlags declares the flags compile and run share.
func addPlanFlags(fl *pflag.FlagSet, f *compileFlags) {
	fl.StringVar(&f.cluster, "cluster", "", "cluster: preset[:hosts] or a JSON file; cpu:8 is 8 devices, a GPU preset counts hosts (dgx-a100:2 is 16 GPUs)")
	fl.IntVar(&f.batch, "batch", 0, "global batch size (default: the model's)")
	fl.StringVar(&f.microbatches, "microbatches", "auto", "micro-batches per step, or auto to search the divisors of the batch")
	fl.IntVar(&f.microbatchSize, "microbatch-size", 0, "samples per micro-batch of the whole batch, across data-parallel replicas (instead of --microbatches; Megatron-LM's --micro-batch-size counts per replica: multiply it by dp)")
	fl.StringVar(&f.schedule, "schedule", "1f1b", "pipeline schedule: 1f1b or gpipe")
	fl.StringVar(&f.batchNorm, "batch-norm", autopar.BatchNormStep, "what batch_norm's statistics run over: step (the step's whole batch, as the model says: one micro-batch) or microbatch (each micro-batch, as GPipe and Alpa take them)")
	fl.StringVar(&f.remat, "remat", "auto", "activation recomputation: auto (per stage, where memory forces it), none, or full (every stage)")
	fl.StringVar(&f.memory, "memory", "", "device memory to plan for (e.g. 16GiB; default the cluster's)")
	fl.IntVar(&f.layers, "layers", 0, "layers to cluster the step into (default min(8, max(devices, the model's blocks)))")
	fl.StringVar(&f.plan, "plan", "", "cost a manual plan instead of searching: tp=N,pp=N,dp=N, or the stages of a plan.json")
	fl.StringVar(&f.optimizer, "optimizer", "sgd", "optimizer: sgd (momentum 0.9) or adam")
	fl.StringVar(&f.search, "search", autopar.DefaultSearch, "stage search: fast (layer solutions composed, chosen stages solved exactly) or exhaustive (one ILP per layer range and mesh)")
	fl.StringVar(&f.precision, "precision", "", "compute dtype of the step: f32, f16 or bf16 (every float of the model in it), mixed (bf16 with f32 master weights and optimizer state) or mixed-f16 (default: the model's dtypes)")
	fl.Float64Var(&f.lossScale, "loss-scale", 0, "static loss scale: the backward starts from loss×S and the update divides by S (for f16; 0: none)")
	fl.DurationVar(&f.timeLimit, "time-limit", 30*time.Second, "lp_solve CPU-time limit per sharding ILP, a backstop behind --ilp-iterations: raised to 10 ms an iteration of the budget, so that the budget stops first (--ilp-iterations -1: this limit alone; 0: the default)")
	fl.Int64Var(&f.ilpIterations, "ilp-iterations", autopar.DefaultILPIterations, "lp_solve simplex iterations allowed per sharding ILP, branch and bound included: the same stop on any machine under any load (0: the default, -1: no limit)")
	fl.BoolVar(&f.lpSolveOnly, "lp-solve-only", false, "send every sharding ILP to lp_solve, without first trying the message-passing certificate (the same optimum; tied plans may differ)")
}

// compileModel reads a model and compiles it as the flags say, showing progress on stderr
// (see progress).
func compileModel(ctx context.Context, stderr io.Writer, path string, f compileFlags) (*ir.Graph, *autopar.Plan, error) {
	prog := startProgress(stderr, global.quiet)
	defer prog.close()
	return compileWith(ctx, prog, path, f, nil)
}

// compileWith is compileModel reporting to prog, which the caller closes. It runs the
// compiler's phases as cfg says (nil: up to the search, as autopar.Compile) and returns the
// plan, nil when cfg stops before the search.
func compileWith(ctx context.Context, prog *progress, path string, f compileFlags, cfg *autopar.PhaseConfig) (*ir.Graph, *autopar.Plan, error) {
	c, err := parseCluster(f.cluster)
	if err != nil {
		return nil, nil, err
	}
	prog.setPhase("reading the model")
	g, err := parseModel(path)
	if err != nil {
		return nil, nil, err
	}
	if f.batch < 0 || f.batch > ir.MaxElements {
		return nil, nil, fmt.Errorf("--batch %d: expected a batch size from 1 to 2^50, or 0 for the model's", f.batch)
	}
	if f.batch != 0 {
		if g, err = passes.Rebatch(g, f.batch); err != nil {
			return nil, nil, fmt.Errorf("--batch %d: %w", f.batch, err)
		}
	}
	opts, err := compileOptions(f)
	if err != nil {
		return nil, nil, err
	}
	if f.microbatchSize != 0 {
		if opts.Microbatches, err = microbatchesOfSize(g, f); err != nil {
			return nil, nil, err
		}
	}
	if opts.From != nil {
		if err := opts.From.CheckFor(g, c); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", f.plan, err)
		}
	}
	prog.setPhase("building the training step and its layers")
	opts.Progress = prog.set
	// Compile checks ctx in its search, but not inside every pass (autodiff of a huge model
	// takes minutes): interruptible makes Ctrl-C stop the command at once all the same.
	if cfg == nil {
		cfg = &autopar.PhaseConfig{UpTo: "search", Check: f.checkPhases}
	}
	s, err := interruptible(ctx, func() (*autopar.Compilation, error) { return autopar.Run(ctx, g, c, opts, cfg) })
	if err != nil {
		return g, nil, err
	}
	return g, s.Plan, nil
}

// microbatchesOfSize turns --microbatch-size into a micro-batch count of g's batch.
func microbatchesOfSize(g *ir.Graph, f compileFlags) (int, error) {
	if f.microbatches != "auto" {
		return 0, fmt.Errorf("--microbatch-size %d and --microbatches %s: give one", f.microbatchSize, f.microbatches)
	}
	batch, err := passes.BatchSize(g)
	if err != nil {
		return 0, fmt.Errorf("--microbatch-size: %w", err)
	}
	if f.microbatchSize < 1 || batch%f.microbatchSize != 0 {
		return 0, fmt.Errorf("--microbatch-size %d: expected a divisor of the batch %d", f.microbatchSize, batch)
	}
	return batch / f.microbatchSize, nil
}

func compileOptions(f compileFlags) (autopar.Options, error) {
	var o autopar.Options
	opt, err := optimizerFrom(trainFlags{optimizer: f.optimizer, lr: f.lr, momentum: 0.9, precision: f.precision, lossScale: f.lossScale})
	if err != nil {
		return o, err
	}
	o.Optimizer = opt
	if f.microbatches != "auto" {
		b, err := strconv.Atoi(f.microbatches)
		if err != nil || b < 1 || f.microbatches[0] == '+' {
			return o, fmt.Errorf("--microbatches %q: expected a count ≥ 1 or auto", f.microbatches)
		}
		o.Microbatches = b
	}
	if f.timeLimit < 0 {
		return o, fmt.Errorf("--time-limit %v: expected a positive duration, e.g. 30s", f.timeLimit)
	}
	o.ILPTimeLimit = f.timeLimit
	if f.ilpIterations < -1 {
		return o, fmt.Errorf("--ilp-iterations %d: expected a count ≥ 1, 0 for the default or -1 for no limit", f.ilpIterations)
	}
	o.ILPIterations = f.ilpIterations
	o.LPSolveOnly = f.lpSolveOnly
	if f.search != "" && f.search != autopar.SearchFast && f.search != autopar.SearchExhaustive {
		return o, fmt.Errorf("--search %q: expected fast or exhaustive", f.search)
	}
	o.Search = f.search
	if f.schedule != "1f1b" && f.schedule != "gpipe" {
		return o, fmt.Errorf("--schedule %q: expected 1f1b or gpipe", f.schedule)
	}
	o.Schedule = f.schedule
	switch f.remat {
	case "", autopar.RematAuto, autopar.RematNone, autopar.RematFull:
		o.Remat = f.remat
	default:
		return o, fmt.Errorf("--remat %q: expected auto, none or full", f.remat)
	}
	switch f.batchNorm {
	case "", autopar.BatchNormStep, autopar.BatchNormMicrobatch:
		o.BatchNorm = f.batchNorm
	default:
		return o, fmt.Errorf("--batch-norm %q: expected step (statistics over the step's batch) or microbatch (over each micro-batch)", f.batchNorm)
	}
	o.Layers = f.layers
	if f.layers < 0 {
		return o, fmt.Errorf("--layers %d: expected 0 (automatic) or more", f.layers)
	}
	if f.memory != "" {
		m, err := parseSize("--memory", f.memory)
		if err != nil {
			return o, err
		}
		o.MemoryPerDevice = m
	}
	switch {
	case strings.HasSuffix(f.plan, ".json"):
		p, err := readPlanFile(f.plan)
		if err != nil {
			return o, err
		}
		o.From = p // Compile checks it was made for this model and cluster
	case f.plan != "":
		m, err := autopar.ParseManual(f.plan)
		if err != nil {
			return o, err
		}
		o.Manual = m
	}
	return o, nil
}

func runCompile(ctx context.Context, stdout, stderr io.Writer, path string, f compileFlags) error {
	if ctx == nil {
		ctx = context.Background()
	}
	cfg, err := phaseConfig(stdout, stderr, f)
	if err != nil {
		return err
	}
	if err := checkEmit(f.emit, f.out); err != nil {
		return err
	}
	if f.out != "" {
		if err := checkOutputDir(f.out); err != nil {
			return err
		}
	}
	prog := startProgress(stderr, global.quiet)
	defer prog.close()
	_, plan, err := compileWith(ctx, prog, path, f, cfg)
	if err != nil || f.dump != "" {
		return err
	}
	printSummary(stdout, plan)
	if f.out == "" {
		return nil
	}
	prog.setPhase("writing " + f.out)
	return writePlanDir(ctx, f.out, plan, f.emit == "programs")
}

// phaseConfig is how compile runs the phase table: up to the search (autopar.Compile), or
// every phase with --time, or up to --dump's phase, printing what it produced for every
// micro-batch count tried (and stopping there); --check verifies after every phase.
func phaseConfig(stdout, stderr io.Writer, f compileFlags) (*autopar.PhaseConfig, error) {
	cfg := &autopar.PhaseConfig{UpTo: "search", Check: f.checkPhases}
	if f.timePasses {
		cfg.UpTo = ""
	}
	if f.dump != "" {
		if _, ok := autopar.LookupPhase(f.dump); !ok {
			return nil, fmt.Errorf("--dump %q: no such phase, expected one of %s", f.dump, strings.Join(autopar.PhaseNames(), ", "))
		}
		cfg.UpTo = f.dump
	}
	var mu sync.Mutex // After runs on the goroutine interruptible starts
	cfg.After = func(p *autopar.Phase, s *autopar.Compilation, took time.Duration) error {
		mu.Lock()
		defer mu.Unlock()
		at := "" // the phase's compilation: one micro-batch count, or the fastest plan's
		switch p.Scope {
		case autopar.PerMicrobatches:
			at = fmt.Sprintf("B=%d", s.Microbatches)
		case autopar.AllMicrobatches:
			at = fmt.Sprintf("B=%d", s.Microbatches)
		case autopar.Chosen:
			at = fmt.Sprintf("B=%d, the fastest plan", s.Microbatches)
		}
		if f.timePasses && (p.Scope != autopar.AllMicrobatches || took > 0) {
			// An AllMicrobatches phase runs once for every count: its time comes with the first.
			if p.Scope == autopar.AllMicrobatches {
				at = "every micro-batch count together"
			}
			fmt.Fprintf(stderr, "phase %-10s %10v  %s\n", p.Name, took.Round(time.Microsecond), at)
		}
		if p.Name != f.dump {
			return nil
		}
		if at != "" {
			fmt.Fprintf(stdout, "# after %s, %s\n", p.Name, at)
		}
		return p.Dump(stdout, s)
	}
	return cfg, nil
}

// printSummary prints the plan's stages and its predicted step. The step's breakdown is
// Prediction's: the slowest stage's compute and communication over all micro-batches, the
// pipeline bubble, and the first stage's gradient sync and update, once; so the line
// names those stages. The table gives every stage's own split per micro-batch and its
// once-per-step part, so no stage's communication is hidden behind the slowest's.
func printSummary(w io.Writer, p *autopar.Plan) {
	pr := p.Predicted
	precision := ""
	if p.Optimizer.Precision != "" {
		precision = ", precision " + p.Optimizer.Precision
	}
	if p.BatchNorm == autopar.BatchNormMicrobatch {
		precision += fmt.Sprintf(", batch norm over each micro-batch of %d", p.Batch/p.Microbatches)
	}
	fmt.Fprintf(w, "model %s, batch %d in %d micro-batches (%s)%s, cluster %s\n\n",
		p.Model, p.Batch, p.Microbatches, p.Schedule, precision, p.Cluster.String())
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "stage\tlayers\tsubmesh\tlogical mesh\tdevices\ttime/µbatch\tcompute\tcommunication\trecv\tonce/step\tgrad sync\tmemory/device\tcapacity")
	slow := 0
	for i, s := range p.Stages {
		if s.Time+s.RecvTime > p.Stages[slow].Time+p.Stages[slow].RecvTime {
			slow = i
		}
		compute, comm := s.MicrobatchSplit()
		fmt.Fprintf(tw, "%d\t%d-%d\t%s\t%dx%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", i, s.FirstLayer, s.LastLayer, s.Submesh,
			s.Logical[0], s.Logical[1], deviceRange(s.Devices), units.Seconds(s.Time), units.Seconds(compute),
			units.Seconds(comm), units.Seconds(s.RecvTime), units.Seconds(s.StepTime), units.Seconds(s.StepComm),
			units.Bytes(s.MemoryBytes), units.Bytes(pr.DeviceMemory))
	}
	tw.Flush()
	fmt.Fprintln(w, "compute and communication (resharding included) per micro-batch, forward + backward; recv: receiving from other stages per micro-batch (activations, gradients); once/step: gradient sync + optimizer update, after the stage's last backward; logical mesh: data x model parallel")
	var remat []string
	for i, s := range p.Stages {
		switch {
		case s.RecomputeLayers:
			remat = append(remat, strconv.Itoa(i)+" (layer by layer)")
		case s.Recompute:
			remat = append(remat, strconv.Itoa(i))
		}
	}
	if len(remat) > 0 {
		fmt.Fprintf(w, "recomputing activations in the backward (--remat): stage %s\n", strings.Join(remat, ", "))
	}
	stage := fmt.Sprintf("stage %d, the slowest,", slow)
	if len(p.Stages) == 1 {
		stage = "the one stage"
	}
	once := "once, stage 0's"
	if len(p.Stages) == 1 {
		once = "once"
	}
	sendRecv := ""
	if pr.SendRecv > 0 {
		sendRecv = " + send/recv between stages " + units.Seconds(pr.SendRecv)
	}
	fmt.Fprintf(w, "\nstep time %s = %s over %d micro-batches (compute %s + communication %s) + pipeline bubble %s + gradient sync %s + update %s (%s)%s\n",
		units.Seconds(pr.StepTime), stage, p.Microbatches, units.Seconds(pr.Compute), units.Seconds(pr.Communication),
		units.Seconds(pr.Bubble), units.Seconds(pr.Sync), units.Seconds(pr.Update), once, sendRecv)
	fmt.Fprintf(w, "throughput %s samples/s, %s per device, model-FLOPs utilization %.1f%%\n",
		units.Number(pr.SamplesPerSecond), units.FLOPRate(pr.TFLOPSPerDevice*1e12), 100*pr.MFU)
	fmt.Fprintf(w, "search: %d layers, %d sharding ILPs solved\n", len(p.Layers), pr.Solves)
}

func deviceRange(ds []int) string {
	if len(ds) == 0 {
		return "-"
	}
	if ds[len(ds)-1]-ds[0] == len(ds)-1 {
		if len(ds) == 1 {
			return strconv.Itoa(ds[0])
		}
		return fmt.Sprintf("%d-%d", ds[0], ds[len(ds)-1])
	}
	var b bytes.Buffer
	for i, d := range ds {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(d))
	}
	return b.String()
}
