package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/autopar/autopar"
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
	tolAuto    bool // --tolerance not given: the step's precision picks it
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
			f.tolAuto = !cmd.Flags().Changed("tolerance")
			return runRun(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), args[0], f)
		},
	}
	fl := cmd.Flags()
	addPlanFlags(fl, &f.compileFlags)
	fl.Float64Var(&f.lr, "lr", 0, "learning rate (default 0.1 for sgd, 0.01 for adam)")
	fl.IntVar(&f.steps, "steps", 3, "training steps to run")
	fl.Int64Var(&f.seed, "seed", 1, "seed of the parameter init and the data")
	fl.BoolVar(&f.check, "check", false, "verify after every compiler phase, run the serial interpreter beside it, print the differences and fail past --tolerance")
	fl.Float64Var(&f.tol, "tolerance", 1e-4, "with --check, the largest relative difference accepted (2e-2 unless given for a step in f16/bf16)")
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
	o := f.loop()
	if err := o.validate(); err != nil {
		return err
	}
	f.checkPhases = f.check // --check also verifies after every phase of the compiler
	if viaMPI, err := runViaMPI(ctx, stdout, stderr, path, f); viaMPI {
		return err
	}
	if f.resume != "" {
		// Refuse a bad checkpoint before compiling.
		var err error
		if o.checkpoint, err = autopar.LoadCheckpoint(f.resume); err != nil {
			return err
		}
	}
	_, plan, err := compileModel(ctx, stderr, path, f.compileFlags)
	if err != nil {
		return err
	}
	printSummary(stdout, plan)
	o.where = "on the built-in runtime"
	return trainLoop(ctx, stdout, plan, o)
}

// loop is the training loop's part of the flags.
func (f *runFlags) loop() loopOpts {
	return loopOpts{steps: f.steps, seed: f.seed, check: f.check, tol: f.tol, tolAuto: f.tolAuto, trace: f.trace, traceFrees: f.traceFrees,
		timeout: f.timeout, weights: f.weights, save: f.save, saveEvery: f.saveEvery, resume: f.resume, lead: true}
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
