package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/autopar/autopar"
	"github.com/autopar/autopar/frontend"
	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/mesh"
	"github.com/autopar/autopar/passes"
	"github.com/autopar/autopar/passes/sharding"
)

type compileFlags struct {
	cluster, microbatches, schedule, memory, plan, out, emit string
	optimizer, dump                                          string
	batch, layers                                            int
	lr                                                       float64
	timePasses                                               bool
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
serialized form (deviceN.json).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runCompile(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), args[0], f)
		},
	}
	fl := cmd.Flags()
	addPlanFlags(fl.StringVar, fl.IntVar, &f)
	fl.Float64Var(&f.lr, "lr", 0, "learning rate (default 0.1 for sgd, 0.01 for adam)")
	fl.StringVarP(&f.out, "output", "o", "", "write plan.json (and programs) into `DIR`")
	fl.StringVar(&f.emit, "emit", "", "also write `programs`: one text program per device")
	fl.StringVar(&f.dump, "dump", "", "print the graph after `PASS` ("+strings.Join(passes.Names(), ", ")+") and stop")
	fl.BoolVar(&f.timePasses, "time", false, "print the time each pass of the pass table takes, on stderr")
	_ = cmd.MarkFlagRequired("cluster")
	return cmd
}

// addPlanFlags declares the flags compile and run share.
func addPlanFlags(str func(*string, string, string, string), num func(*int, string, int, string), f *compileFlags) {
	str(&f.cluster, "cluster", "", "cluster: preset[:hosts] (dgx-a100:16, cpu:8) or a JSON file")
	num(&f.batch, "batch", 0, "global batch size (default: the model's)")
	str(&f.microbatches, "microbatches", "auto", "micro-batches per step, or auto to search the divisors of the batch")
	str(&f.schedule, "schedule", "1f1b", "pipeline schedule: 1f1b or gpipe")
	str(&f.memory, "memory", "", "device memory to plan for (e.g. 16GiB; default the cluster's)")
	num(&f.layers, "layers", 0, "layers to cluster the step into (default automatic)")
	str(&f.plan, "plan", "", "cost a manual plan instead of searching: tp=N,pp=N,dp=N, or the stages of a plan.json")
	str(&f.optimizer, "optimizer", "sgd", "optimizer: sgd (momentum 0.9) or adam")
}

// compileModel reads a model and compiles it as the flags say.
func compileModel(ctx context.Context, stderr io.Writer, path string, f compileFlags) (*ir.Graph, *autopar.Plan, error) {
	c, err := mesh.ParseCluster(f.cluster)
	if err != nil {
		return nil, nil, err
	}
	g, err := frontend.ParseFile(path)
	if err != nil {
		return nil, nil, err
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
	if opts.From != nil {
		if err := opts.From.CheckFor(g, c); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", f.plan, err)
		}
	}
	bar := newProgress(stderr)
	if bar != nil {
		opts.Progress = func(b int, phase string, done, total int) {
			bar.ChangeMax(total)
			bar.Describe(fmt.Sprintf("%s, %d micro-batches", phase, b))
			_ = bar.Set(done)
		}
		defer bar.Clear()
	}
	plan, err := autopar.Compile(ctx, g, c, opts)
	return g, plan, err
}

func compileOptions(f compileFlags) (autopar.Options, error) {
	var o autopar.Options
	opt, err := optimizerFrom(trainFlags{optimizer: f.optimizer, lr: f.lr, momentum: 0.9})
	if err != nil {
		return o, err
	}
	o.Optimizer = opt
	if f.microbatches != "auto" {
		b, err := strconv.Atoi(f.microbatches)
		if err != nil || b < 1 {
			return o, fmt.Errorf("--microbatches %q: expected a count ≥ 1 or auto", f.microbatches)
		}
		o.Microbatches = b
	}
	if f.schedule != "1f1b" && f.schedule != "gpipe" {
		return o, fmt.Errorf("--schedule %q: expected 1f1b or gpipe", f.schedule)
	}
	o.Schedule = f.schedule
	o.Layers = f.layers
	if f.layers < 0 {
		return o, fmt.Errorf("--layers %d: expected 0 (automatic) or more", f.layers)
	}
	if f.memory != "" {
		m, err := parseBytes(f.memory)
		if err != nil || m <= 0 {
			return o, fmt.Errorf("--memory %q: expected a positive size such as 16GiB", f.memory)
		}
		o.MemoryPerDevice = m
	}
	switch {
	case strings.HasSuffix(f.plan, ".json"):
		p, err := autopar.ReadPlanFile(f.plan)
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

// newProgress returns a progress bar on stderr, or nil when stderr is not a terminal.
func newProgress(stderr io.Writer) *progressbar.ProgressBar {
	f, ok := stderr.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return nil
	}
	return progressbar.NewOptions(1, progressbar.OptionSetWriter(stderr), progressbar.OptionSetWidth(30),
		progressbar.OptionShowCount(), progressbar.OptionClearOnFinish(), progressbar.OptionSetPredictTime(true))
}

func runCompile(ctx context.Context, stdout, stderr io.Writer, path string, f compileFlags) error {
	if ctx == nil {
		ctx = context.Background()
	}
	if f.dump != "" || f.timePasses {
		if err := runPasses(stdout, stderr, path, f); err != nil || f.dump != "" {
			return err
		}
	}
	_, plan, err := compileModel(ctx, stderr, path, f)
	if err != nil {
		return err
	}
	printSummary(stdout, plan)
	if f.out == "" {
		return nil
	}
	if f.emit != "" && f.emit != "programs" {
		return fmt.Errorf("--emit %q: expected programs", f.emit)
	}
	return writePlanDir(f.out, plan, f.emit == "programs")
}

// runPasses runs the pass table on the model (verifying between passes), printing the
// graph after --dump's pass and each pass's time with --time.
func runPasses(stdout, stderr io.Writer, path string, f compileFlags) error {
	g, err := frontend.ParseFile(path)
	if err != nil {
		return err
	}
	opts, err := compileOptions(f)
	if err != nil {
		return err
	}
	if _, ok := passes.Lookup(f.dump); f.dump != "" && !ok {
		return fmt.Errorf("--dump %q: no such pass, expected one of %s", f.dump, strings.Join(passes.Names(), ", "))
	}
	cfg := &passes.Config{Optimizer: opts.Optimizer, Check: true}
	if f.timePasses {
		cfg.AfterPass = func(pass string, g *ir.Graph, took time.Duration) {
			fmt.Fprintf(stderr, "pass %-10s %10v  %d values\n", pass, took.Round(time.Microsecond), len(g.Values))
		}
	}
	out, err := passes.Run(g, cfg, f.dump)
	if err != nil || f.dump == "" {
		return err
	}
	return ir.Print(stdout, out)
}

// writePlanDir writes plan.json, and the programs when asked, each file whole or not at all.
func writePlanDir(dir string, plan *autopar.Plan, programs bool) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if programs {
		progs, err := plan.Programs()
		if err != nil {
			return err
		}
		pdir := filepath.Join(dir, "programs")
		if err := os.MkdirAll(pdir, 0o755); err != nil {
			return err
		}
		for _, p := range progs {
			data, err := p.MarshalJSON()
			if err != nil {
				return err
			}
			base := filepath.Join(pdir, fmt.Sprintf("device%d", p.Device))
			for _, f := range [][2]string{{".txt", p.String()}, {".json", string(data)}} {
				if err := writeFileAtomic(base+f[0], func(w io.Writer) error { _, err := io.WriteString(w, f[1]); return err }); err != nil {
					return err
				}
			}
		}
	}
	return writeFileAtomic(filepath.Join(dir, "plan.json"), plan.WriteJSON)
}

func printSummary(w io.Writer, p *autopar.Plan) {
	pr := p.Predicted
	fmt.Fprintf(w, "model %s, batch %d in %d micro-batches (%s), cluster %s\n\n",
		p.Model, p.Batch, p.Microbatches, p.Schedule, p.Cluster.String())
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "stage\tlayers\tsubmesh\tlogical mesh\tdevices\ttime/µbatch\tmemory/device\tcapacity")
	for i, s := range p.Stages {
		fmt.Fprintf(tw, "%d\t%d-%d\t%s\t(%d, %d)\t%s\t%s\t%s\t%s\n", i, s.FirstLayer, s.LastLayer, s.Submesh,
			s.Logical[0], s.Logical[1], deviceRange(s.Devices), seconds(s.Time),
			sharding.FormatBytes(s.MemoryBytes), sharding.FormatBytes(pr.DeviceMemory))
	}
	tw.Flush()
	fmt.Fprintf(w, "\nstep time %s = compute %s + communication %s + pipeline bubble %s\n",
		seconds(pr.StepTime), seconds(pr.Compute), seconds(pr.Communication), seconds(pr.Bubble))
	fmt.Fprintf(w, "throughput %.4g samples/s, %.4g TFLOP/s per device, model-FLOPs utilization %.1f%%\n",
		pr.SamplesPerSecond, pr.TFLOPSPerDevice, 100*pr.MFU)
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

// seconds prints a duration in seconds with a unit that keeps it readable.
func seconds(s float64) string {
	switch {
	case s >= 1:
		return fmt.Sprintf("%.3g s", s)
	case s >= 1e-3:
		return fmt.Sprintf("%.3g ms", s*1e3)
	case s >= 1e-6:
		return fmt.Sprintf("%.3g µs", s*1e6)
	}
	return fmt.Sprintf("%.3g s", s)
}
