package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"math"
	"time"

	"github.com/spf13/cobra"

	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/passes"
	"github.com/autopar/autopar/runtime/interp"
)

// trainFlags are the options of `autopar train`.
type trainFlags struct {
	steps     int
	optimizer string
	lr        float64
	momentum  float64
	seed      int64
	freshData bool
	precision string
	lossScale float64
}

func newTrainCmd() *cobra.Command {
	var f trainFlags
	cmd := &cobra.Command{
		Use:   "train MODEL.ir",
		Short: "build the training step of a model and run it on the serial interpreter",
		Long: `Builds one training step (forward, loss, backward, optimizer update) from a forward
graph whose first output is a scalar loss, then runs it for --steps steps on the serial
reference interpreter and prints the loss of each step. Parameters and data are drawn from
--seed; by default every step sees the same batch, so the loss of a working model falls.
A graph that already holds its updates (a training step) runs as it is.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runTrain(cmd.Context(), cmd.OutOrStdout(), args[0], f)
		},
	}
	fl := cmd.Flags()
	fl.IntVar(&f.steps, "steps", 10, "training steps to run")
	fl.StringVar(&f.optimizer, "optimizer", "sgd", "optimizer: sgd (with momentum) or adam")
	fl.Float64Var(&f.lr, "lr", 0, "learning rate (default 0.1 for sgd, 0.01 for adam)")
	fl.Float64Var(&f.momentum, "momentum", 0.9, "sgd momentum (0 for plain sgd)")
	fl.Int64Var(&f.seed, "seed", 1, "seed of the parameter init and the data")
	fl.BoolVar(&f.freshData, "fresh-data", false, "draw a new random batch every step")
	fl.Float64Var(&f.lossScale, "loss-scale", 0, "static loss scale: the backward starts from loss×S and the update divides by S (for f16; 0: none)")
	fl.StringVar(&f.precision, "precision", "", "compute dtype of the step: f32, f16, bf16, mixed (bf16 with f32 master weights and state) or mixed-f16 (default: the model's dtypes)")
	return cmd
}

// optimizerFrom turns the flags into the optimizer of the training step.
func optimizerFrom(f trainFlags) (passes.Optimizer, error) {
	if math.IsNaN(f.lr) || math.IsInf(f.lr, 0) || f.lr < 0 {
		return passes.Optimizer{}, fmt.Errorf("--lr %v: expected a finite learning rate > 0 (or 0 for the default)", f.lr)
	}
	if math.IsNaN(f.momentum) || f.momentum < 0 || f.momentum >= 1 {
		return passes.Optimizer{}, fmt.Errorf("--momentum %v: expected a momentum in [0, 1)", f.momentum)
	}
	if _, err := passes.ParsePrecision(f.precision); err != nil {
		return passes.Optimizer{}, fmt.Errorf("--precision: %w", err)
	}
	if !(f.lossScale >= 0) || math.IsInf(f.lossScale, 0) {
		return passes.Optimizer{}, fmt.Errorf("--loss-scale %v: expected a finite scale > 0 (or 0 for none)", f.lossScale)
	}
	switch f.optimizer {
	case "sgd":
		lr := f.lr
		if lr == 0 {
			lr = 0.1
		}
		return passes.Optimizer{Kind: "sgd", LR: lr, Momentum: f.momentum, Precision: f.precision, LossScale: f.lossScale}, nil
	case "adam":
		lr := f.lr
		if lr == 0 {
			lr = 0.01
		}
		return passes.Optimizer{Kind: "adam", LR: lr, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, Precision: f.precision, LossScale: f.lossScale}, nil
	}
	return passes.Optimizer{}, fmt.Errorf("unknown optimizer %q, expected sgd or adam", f.optimizer)
}

// loadStep reads a model and returns its training step: the graph itself when it already
// updates its params, otherwise the graph with backward and optimizer added.
func loadStep(path string, f trainFlags) (*ir.Graph, error) {
	g, err := parseModel(path)
	if err != nil {
		return nil, err
	}
	if len(g.Updates) > 0 {
		return g, nil
	}
	opt, err := optimizerFrom(f)
	if err != nil {
		return nil, err
	}
	return passes.TrainingStep(g, opt)
}

func runTrain(ctx context.Context, w io.Writer, path string, f trainFlags) error {
	if f.steps < 1 {
		return fmt.Errorf("--steps must be at least 1, got %d", f.steps)
	}
	if ctx == nil {
		ctx = context.Background()
	}
	step, err := loadStep(path, f)
	if err != nil {
		return err
	}
	if len(step.Outputs) == 0 {
		return fmt.Errorf("%s: the graph has no output to report as the loss", path)
	}
	state := interp.InitParams(step, f.seed)
	data := interp.RandomInputs(step, f.seed+1)
	fmt.Fprintf(w, "%s: %d values, %d params and state, %s optimizer\n",
		step.Name, len(step.Values), len(step.Updates), f.optimizer)
	for i := 1; i <= f.steps; i++ {
		if f.freshData && i > 1 {
			data = interp.RandomInputs(step, f.seed+int64(i))
		}
		feeds := interp.Feeds{}
		maps.Copy(feeds, state)
		maps.Copy(feeds, data)
		start := time.Now()
		res, err := interp.Run(ctx, step, feeds)
		if err != nil {
			return fmt.Errorf("step %d: %w", i, err)
		}
		loss := res.Outputs[0]
		if loss.Len() != 1 {
			return fmt.Errorf("%s: output %s is %s, not a scalar loss",
				path, step.Value(step.Outputs[0].Value).Name, loss.Type)
		}
		fmt.Fprintf(w, "step %4d  loss %.6f  (%v)\n", i, loss.At(0), time.Since(start).Round(time.Millisecond))
		if l := loss.At(0); math.IsNaN(l) || math.IsInf(l, 0) {
			return fmt.Errorf("step %d: the loss is %v; training diverged (try a smaller --lr)", i, l)
		}
		state.Apply(res)
	}
	return nil
}
