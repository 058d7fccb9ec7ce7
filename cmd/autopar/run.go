package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"time"

	"github.com/spf13/cobra"

	"github.com/autopar/autopar"
	"github.com/autopar/autopar/runtime"
	"github.com/autopar/autopar/runtime/interp"
	"github.com/autopar/autopar/safetensors"
)

type runFlags struct {
	compileFlags
	steps   int
	seed    int64
	check   bool
	trace   string
	weights string
	// traceFrees keeps free instructions in --trace's file.
	traceFrees bool
	timeout    time.Duration
	tol        float64
	// transport is inproc, mpi or auto (run_mpi.go).
	transport string
	// save, saveEvery, resume: the checkpoint written, how often, and the one resumed.
	save      string
	saveEvery int
	resume    string
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
the gradients and the updated parameters (relative: to the largest magnitude of each kind).
The params and optimizer state stay on the devices between steps (autopar.Trainer); --save
writes them whole to a checkpoint, which --resume continues under any plan of the model.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runRun(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), args[0], f)
		},
	}
	fl := cmd.Flags()
	addPlanFlags(fl, &f.compileFlags)
	fl.Float64Var(&f.lr, "lr", 0, "learning rate (default 0.1 for sgd, 0.01 for adam)")
	fl.IntVar(&f.steps, "steps", 3, "training steps to run")
	fl.Int64Var(&f.seed, "seed", 1, "seed of the parameter init and the data")
	fl.BoolVar(&f.check, "check", false, "verify after every compiler phase, run the serial interpreter beside it, print the differences and fail past --tolerance")
	fl.Float64Var(&f.tol, "tolerance", 1e-4, "with --check, the largest relative difference accepted")
	fl.StringVar(&f.trace, "trace", "", "write a Chrome trace (Perfetto) of the last step to `FILE`")
	fl.StringVar(&f.weights, "weights", "", "start from the params in `FILE` (safetensors, as autopar import writes)")
	fl.DurationVar(&f.timeout, "timeout", time.Minute, "how long a device may wait for a peer")
	fl.BoolVar(&f.traceFrees, "trace-frees", false, "with --trace, keep the free instructions (left out: nearly half the events, no time)")
	fl.StringVar(&f.transport, "transport", "auto", "inproc (goroutines), mpi (one process per device, under mpirun), or auto: mpi when started by mpirun")
	fl.StringVar(&f.save, "save", "", "save a checkpoint (params and optimizer state, safetensors) to `FILE` after the last step")
	fl.IntVar(&f.saveEvery, "save-every", 0, "with --save, also save after every `N`th step")
	fl.StringVar(&f.resume, "resume", "", "resume from the checkpoint in `FILE`, saved under any plan of the same model and optimizer")
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
	if !(f.tol > 0) || math.IsInf(f.tol, 0) {
		return fmt.Errorf("--tolerance %v: expected a finite relative difference > 0, e.g. 1e-4", f.tol)
	}
	if f.saveEvery < 0 || (f.saveEvery > 0 && f.save == "") {
		return fmt.Errorf("--save-every %d needs --save FILE and a count of at least 1", f.saveEvery)
	}
	if viaMPI, err := runViaMPI(ctx, stdout, stderr, path, f); viaMPI {
		return err
	}
	var ck *autopar.Checkpoint
	if f.resume != "" {
		var err error
		if ck, err = autopar.LoadCheckpoint(f.resume); err != nil {
			return err
		}
	}
	f.checkPhases = f.check // --check also verifies after every phase of the compiler
	fwd, plan, err := compileModel(ctx, stderr, path, f.compileFlags)
	if err != nil {
		return err
	}
	printSummary(stdout, plan)
	opts := autopar.TrainerOptions{Seed: f.seed, CheckSerial: f.check, Tolerance: f.tol, Timeout: f.timeout, Checkpoint: ck}
	if f.weights != "" {
		if ck != nil {
			return fmt.Errorf("--weights and --resume both set the params: give one")
		}
		w, _, err := safetensors.ReadFile(f.weights)
		if err != nil {
			return err
		}
		opts.Weights = w
	}
	tr, err := interruptible(ctx, func() (*autopar.Trainer, error) { return autopar.NewTrainer(ctx, plan, opts) })
	if err != nil {
		if f.weights != "" {
			return fmt.Errorf("%s: %w", f.weights, err)
		}
		return err
	}
	data, err := interp.GenerateInputs(fwd, f.seed+1)
	if err != nil {
		return err
	}
	batch := autopar.Batch{}
	for name, x := range data {
		batch[name] = x
	}
	if ck != nil {
		fmt.Fprintf(stdout, "\nresumed %s at step %d\n", f.resume, ck.Step)
	}
	fmt.Fprintf(stdout, "\nrunning %d programs on the built-in runtime\n", tr.Devices())
	last := tr.Steps() + f.steps
	for tr.Steps() < last {
		if f.trace != "" && tr.Steps() == last-1 {
			tr.TraceNext()
		}
		start := time.Now()
		loss, err := tr.Step(ctx, batch)
		if err != nil {
			return err
		}
		step := tr.Steps()
		fmt.Fprintf(stdout, "step %4d  loss %.6f  (%v)\n", step, loss, time.Since(start).Round(time.Millisecond))
		if math.IsNaN(loss) || math.IsInf(loss, 0) {
			return fmt.Errorf("step %d: the loss is %v; training diverged (try a smaller --lr)", step, loss)
		}
		if f.check {
			c := tr.LastCheck()
			fmt.Fprintf(stdout, "      check: loss %s; gradients %s; params %s\n", diffString(c.Loss), diffString(c.Grads), diffString(c.Updates))
		}
		if step == last && f.trace != "" {
			write := func(w io.Writer) error {
				return tr.LastResult().WriteTraceWith(w, runtime.TraceOptions{Frees: f.traceFrees, Stages: stageDevices(plan)})
			}
			if err := writeFileAtomic(f.trace, write); err != nil {
				return err
			}
		}
		if f.save != "" && (step == last || (f.saveEvery > 0 && step%f.saveEvery == 0)) {
			if err := tr.Save(f.save); err != nil {
				return err
			}
			fmt.Fprintf(stdout, "      saved %s at step %d\n", f.save, step)
		}
	}
	return nil
}

// diffString prints a check's difference of one kind: the largest absolute difference,
// relative to the kind's largest magnitude (element-wise or per-tensor ratios would report
// rounding noise as error where values cancel: the gradient of attention's key bias is zero
// in exact arithmetic, so both runs hold noise there).
func diffString(d autopar.Diff) string {
	s := fmt.Sprintf("max abs %.3g, rel %.3g", d.Abs, d.Rel())
	if d.Worst != "" && d.Abs > 0 {
		s += " (" + d.Worst + ")"
	}
	return s
}

// stageDevices lists each stage's devices, for the trace's process per stage.
func stageDevices(p *autopar.Plan) [][]int {
	out := make([][]int, len(p.Stages))
	for i, s := range p.Stages {
		out[i] = s.Devices
	}
	return out
}
