package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"math"
	"sort"
	"time"

	"github.com/spf13/cobra"

	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/passes"
	"github.com/autopar/autopar/runtime"
	"github.com/autopar/autopar/runtime/interp"
	"github.com/autopar/autopar/runtime/kernels"
)

type runFlags struct {
	compileFlags
	steps   int
	seed    int64
	check   bool
	trace   string
	weights string
	timeout time.Duration
	tol     float64
	// transport is inproc, mpi or auto (run_mpi.go).
	transport string
}

func newRunCmd() *cobra.Command {
	var f runFlags
	cmd := &cobra.Command{
		Use:   "run MODEL.ir --cluster SPEC --steps N [--check]",
		Short: "compile a model and train it on the built-in runtime, one goroutine per device",
		Long: `Compiles the model as autopar compile does, lowers the plan to one program per device,
and runs --steps training steps on the built-in runtime, printing the loss of each step.
With --check the serial interpreter runs the same steps beside it, on the same parameters
and data, and each step prints the largest absolute and relative differences in the loss,
the gradients and the updated parameters (relative: to the largest magnitude of each kind).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runRun(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), args[0], f)
		},
	}
	fl := cmd.Flags()
	addPlanFlags(fl.StringVar, fl.IntVar, &f.compileFlags)
	fl.Float64Var(&f.lr, "lr", 0, "learning rate (default 0.1 for sgd, 0.01 for adam)")
	fl.IntVar(&f.steps, "steps", 3, "training steps to run")
	fl.Int64Var(&f.seed, "seed", 1, "seed of the parameter init and the data")
	fl.BoolVar(&f.check, "check", false, "run the serial interpreter beside it, print the differences and fail past --tolerance")
	fl.Float64Var(&f.tol, "tolerance", 1e-4, "with --check, the largest relative difference accepted")
	fl.StringVar(&f.trace, "trace", "", "write a Chrome trace (Perfetto) of the last step to `FILE`")
	fl.StringVar(&f.weights, "weights", "", "start from the params in `FILE` (safetensors, as autopar import writes)")
	fl.DurationVar(&f.timeout, "timeout", time.Minute, "how long a device may wait for a peer")
	fl.StringVar(&f.transport, "transport", "auto", "inproc (goroutines), mpi (one process per device, under mpirun), or auto: mpi when started by mpirun")
	_ = cmd.MarkFlagRequired("cluster")
	return cmd
}

func runRun(ctx context.Context, stdout, stderr io.Writer, path string, f runFlags) error {
	if ctx == nil {
		ctx = context.Background()
	}
	if f.steps < 1 {
		return fmt.Errorf("--steps must be at least 1, got %d", f.steps)
	}
	if f.timeout <= 0 {
		return fmt.Errorf("--timeout %v: expected a positive duration, e.g. 30s", f.timeout)
	}
	if !(f.tol >= 0) || math.IsInf(f.tol, 0) {
		return fmt.Errorf("--tolerance %v: expected a finite relative difference ≥ 0, e.g. 1e-4", f.tol)
	}
	if viaMPI, err := runViaMPI(ctx, stdout, stderr, path, f); viaMPI {
		return err
	}
	fwd, plan, err := compileModel(ctx, stderr, path, f.compileFlags)
	if err != nil {
		return err
	}
	printSummary(stdout, plan)
	progs, err := interruptible(ctx, plan.Programs)
	if err != nil {
		return err
	}
	full, err := passes.TrainingStep(fwd, plan.Optimizer.Optimizer())
	if err != nil {
		return err
	}
	state := interp.InitParams(full, f.seed)
	if f.weights != "" {
		if err := loadWeights(f.weights, full, state); err != nil {
			return err
		}
	}
	data, err := interp.GenerateInputs(full, f.seed+1)
	if err != nil {
		return err
	}
	loss := full.Value(full.Outputs[0].Value).Name
	fmt.Fprintf(stdout, "\nrunning %d programs on the built-in runtime\n", len(progs))
	for step := 1; step <= f.steps; step++ {
		feeds := interp.Feeds{}
		maps.Copy(feeds, state)
		maps.Copy(feeds, data)
		start := time.Now()
		got, err := runtime.Run(ctx, progs, runtime.Data(feeds), runtime.Options{Timeout: f.timeout, Trace: f.trace != "" && step == f.steps})
		if err != nil {
			return fmt.Errorf("step %d: %w", step, err)
		}
		took := time.Since(start)
		l := got.Stores[loss].At(0)
		fmt.Fprintf(stdout, "step %4d  loss %.6f  (%v)\n", step, l, took.Round(time.Millisecond))
		if f.check {
			if err := checkStep(ctx, stdout, full, feeds, got, f.tol); err != nil {
				return fmt.Errorf("step %d: %w", step, err)
			}
		}
		if math.IsNaN(l) || math.IsInf(l, 0) {
			return fmt.Errorf("step %d: the loss is %v; training diverged (try a smaller --lr)", step, l)
		}
		if step == f.steps && f.trace != "" {
			if err := writeFileAtomic(f.trace, got.WriteTrace); err != nil {
				return err
			}
		}
		for _, u := range full.Updates {
			name := full.Value(u.Target).Name
			state[name] = got.Stores[name]
		}
	}
	return nil
}

// checkStep runs the full-batch step serially on the same feeds and prints the largest
// differences from the parallel run, by kind. It fails when a tensor is missing, not a
// number, or differs by more than tol relative to the largest magnitude of its kind.
func checkStep(ctx context.Context, w io.Writer, full *ir.Graph, feeds interp.Feeds, got *runtime.Result, tol float64) error {
	want, err := interp.RunKeep(ctx, full, feeds)
	if err != nil {
		return fmt.Errorf("--check: serial run: %w", err)
	}
	var loss, grads, params diff
	loss.add(full.Value(full.Outputs[0].Value).Name, got.Stores, want.Outputs[0])
	for _, p := range full.Leaves(ir.OpParam) {
		name := "grad." + full.Value(p).Name
		if id, ok := full.Lookup(name); ok {
			grads.add(name, got.Stores, want.Values[id])
		}
	}
	names := make([]string, 0, len(want.Updates))
	for name := range want.Updates {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		params.add(name, got.Stores, want.Updates[name])
	}
	fmt.Fprintf(w, "      check: loss %s; gradients %s; params %s\n", loss, grads, params)
	for _, k := range []struct {
		kind string
		d    diff
	}{{"loss", loss}, {"gradients", grads}, {"params", params}} {
		if err := k.d.check(tol); err != nil {
			return fmt.Errorf("--check: %s: %w", k.kind, err)
		}
	}
	return nil
}

// diff tracks, over the tensors of one kind, the largest absolute difference and the
// largest magnitude. The relative difference is the one over the other: element-wise or even
// per-tensor ratios would report rounding noise as error where values cancel (the gradient
// of attention's key bias is zero in exact arithmetic, so both runs hold noise there).
type diff struct {
	abs, scale float64
	worst      string
	missing    []string
	nan        string // the first tensor holding a NaN or an infinity, in either run
}

func (d *diff) add(name string, stores map[string]*kernels.Tensor, want *kernels.Tensor) {
	got, ok := stores[name]
	if !ok || want == nil || got.Len() != want.Len() {
		d.missing = append(d.missing, name)
		return
	}
	for i := range got.Len() {
		x, y := got.At(i), want.At(i)
		if !finite(x) || !finite(y) {
			if d.nan == "" {
				d.nan = fmt.Sprintf("%s[%d] is %v here and %v serially", name, i, x, y)
			}
			continue
		}
		if e := math.Abs(x - y); e > d.abs {
			d.abs, d.worst = e, name
		}
		d.scale = max(d.scale, math.Abs(x), math.Abs(y))
	}
}

func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

// rel is the largest absolute difference over the largest magnitude.
func (d diff) rel() float64 {
	if d.scale > 0 {
		return d.abs / d.scale
	}
	return 0
}

// check fails on a missing tensor, a NaN or infinity, or a relative difference over tol.
func (d diff) check(tol float64) error {
	switch {
	case len(d.missing) > 0:
		return fmt.Errorf("%d tensors missing from the parallel run: %v", len(d.missing), d.missing)
	case d.nan != "":
		return fmt.Errorf("not a number: %s", d.nan)
	case d.rel() > tol:
		return fmt.Errorf("relative difference %.3g from the serial run (%s) is over --tolerance %.3g", d.rel(), d.worst, tol)
	}
	return nil
}

func (d diff) String() string {
	s := fmt.Sprintf("max abs %.3g, rel %.3g", d.abs, d.rel())
	if d.nan != "" {
		s = "NaN: " + d.nan
	}
	if d.worst != "" && d.abs > 0 {
		s += " (" + d.worst + ")"
	}
	if len(d.missing) > 0 {
		s += fmt.Sprintf(", %d missing: %v", len(d.missing), d.missing)
	}
	return s
}
