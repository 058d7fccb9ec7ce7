package autopar_test

import (
	"bytes"
	"context"
	"fmt"
	"log"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/autopar/autopar"
	"github.com/autopar/autopar/frontend"
	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/mesh"
	"github.com/autopar/autopar/passes"
	"github.com/autopar/autopar/runtime"
	"github.com/autopar/autopar/runtime/interp"
)

// buildMLP records a two-layer MLP classifier with the builder: 16 examples of 8 features
// into 4 classes. Its first output is the mean loss, as Compile expects.
func buildMLP() *ir.Graph {
	b := frontend.NewBuilder("mlp")
	x := b.Input("x", ir.F32, ir.Shape{16, 8}, 0)
	y := b.Input("y", ir.I32, ir.Shape{16}, 0, frontend.Limit(4))
	h, width := x, 8
	for i, out := range []int{32, 4} {
		l := b.Scope(fmt.Sprintf("l%d", i))
		w := l.Param("w", ir.F32, ir.Shape{width, out})
		bias := l.Param("b", ir.F32, ir.Shape{out}, frontend.Zeros)
		h = l.Named("fc").Add(l.MatMul(h, w), bias)
		if i == 0 {
			h = l.Relu(h)
		}
		width = out
	}
	b.Output(b.Named("loss").ReduceMean(b.SparseCrossEntropy(h, y), 0))
	g, err := b.Build()
	if err != nil {
		log.Fatal(err)
	}
	return g
}

// compileMLP plans buildMLP for a cluster of two CPU devices.
func compileMLP() *autopar.Plan {
	c, err := mesh.ParseCluster("cpu:2")
	if err != nil {
		log.Fatal(err)
	}
	plan, err := autopar.Compile(context.Background(), buildMLP(), c, autopar.Options{Microbatches: 2, Layers: 2})
	if err != nil {
		log.Fatal(err)
	}
	return plan
}

// Compile a model built in Go for two devices and look at the stages it chose.
func ExampleCompile() {
	plan := compileMLP()
	fmt.Printf("%s: %d micro-batches of %d, schedule %s\n", plan.Model, plan.Microbatches, plan.Batch/plan.Microbatches, plan.Schedule)
	for i, s := range plan.Stages {
		fmt.Printf("stage %d: layers %d-%d on devices %v, logical mesh %v\n", i, s.FirstLayer, s.LastLayer, s.Devices, s.Logical)
	}
	fits := true
	for _, s := range plan.Stages {
		fits = fits && s.MemoryBytes <= plan.Predicted.DeviceMemory
	}
	fmt.Println("fits in memory:", fits)
	// Output:
	// mlp: 2 micro-batches of 8, schedule 1f1b
	// stage 0: layers 0-0 on devices [0], logical mesh 1x1
	// stage 1: layers 1-1 on devices [1], logical mesh 1x1
	// fits in memory: true
}

// Lower a plan to one program per device, run one training step on the built-in runtime
// and check it against the serial interpreter.
func ExamplePlan_Programs() {
	ctx := context.Background()
	plan := compileMLP()
	progs, err := plan.Programs()
	if err != nil {
		log.Fatal(err)
	}
	// The feeds are the whole batch and the whole parameters; each device loads its shard.
	step, err := passes.TrainingStep(plan.Forward(), passes.Optimizer{Kind: plan.Optimizer.Kind,
		LR: plan.Optimizer.LR, Momentum: plan.Optimizer.Momentum})
	if err != nil {
		log.Fatal(err)
	}
	feeds := interp.InitParams(step, 1)
	data, err := interp.GenerateInputs(step, 2)
	if err != nil {
		log.Fatal(err)
	}
	for name, t := range data {
		feeds[name] = t
	}
	got, err := runtime.Run(ctx, progs, runtime.Data(feeds), runtime.Options{})
	if err != nil {
		log.Fatal(err)
	}
	want, err := interp.Run(ctx, step, feeds)
	if err != nil {
		log.Fatal(err)
	}
	loss, ref := got.Stores["loss"].At(0), want.Outputs[0].At(0)
	fmt.Println("programs:", len(progs))
	fmt.Printf("loss %.3f, matches the serial interpreter: %v\n", loss, math.Abs(loss-ref) <= 1e-4*math.Max(1, math.Abs(ref)))
	// Output:
	// programs: 2
	// loss 1.402, matches the serial interpreter: true
}

// Save a plan as plan.json and read it back: the file carries its model, and the same plan
// gives the same bytes.
func ExamplePlan_WriteJSON() {
	plan := compileMLP()
	var buf bytes.Buffer
	if err := plan.WriteJSON(&buf); err != nil {
		log.Fatal(err)
	}
	back, err := autopar.ReadPlan(bytes.NewReader(buf.Bytes()))
	if err != nil {
		log.Fatal(err)
	}
	var again bytes.Buffer
	if err := back.WriteJSON(&again); err != nil {
		log.Fatal(err)
	}
	fmt.Println("model:", back.Model, "stages:", len(back.Stages))
	fmt.Println("byte-identical:", bytes.Equal(buf.Bytes(), again.Bytes()))
	fmt.Println("belongs to the model:", back.CheckModel(buildMLP()) == nil)
	// Output:
	// model: mlp stages: 2
	// byte-identical: true
	// belongs to the model: true
}

// Train a model from Go: build it, compile it for four devices, train it with the
// params and optimizer state kept on the devices, and save a checkpoint that any plan of
// the same model resumes (the README's library section).
func ExampleTrainer() {
	ctx := context.Background()
	b := frontend.NewBuilder("mlp")
	x := b.Input("x", ir.F32, ir.Shape{64, 32}, 0)
	y := b.Input("y", ir.I32, ir.Shape{64}, 0, frontend.Limit(10))
	h := b.Relu(b.MatMul(x, b.Param("w1", ir.F32, ir.Shape{32, 64})))
	b.Output(b.ReduceMean(b.SparseCrossEntropy(b.MatMul(h, b.Param("w2", ir.F32, ir.Shape{64, 10})), y), 0))
	g, err := b.Build()
	check(err)
	c, err := autopar.ParseCluster("cpu:4")
	check(err)
	plan, err := autopar.Compile(ctx, g, c, autopar.Options{Microbatches: 2})
	check(err)
	t, err := autopar.NewTrainer(ctx, plan, autopar.TrainerOptions{Seed: 1})
	check(err)
	xs, ys := make([]float32, 64*32), make([]int32, 64)
	for i := range xs {
		xs[i] = float32(i%7) - 3
	}
	for i := range ys {
		ys[i] = int32(i % 10)
	}
	for step := 1; step <= 20; step++ {
		loss, err := t.Step(ctx, autopar.Batch{"x": xs, "y": ys})
		check(err)
		if step%10 == 0 {
			fmt.Printf("step %d: loss %.2f\n", step, loss)
		}
	}
	path := filepath.Join(os.TempDir(), "mlp.safetensors")
	defer os.Remove(path)
	check(t.Save(path)) // resume: autopar.LoadCheckpoint, then TrainerOptions{Checkpoint: ck}
	// Output:
	// step 10: loss 2.38
	// step 20: loss 2.25
}

func check(err error) {
	if err != nil {
		log.Fatal(err)
	}
}

// Run runs the compiler's phase table with a hook after each phase: here up to the
// layering, for 2 micro-batches, verifying after every phase, as `autopar compile --dump
// cluster --check` does.
func ExampleRun() {
	c, err := mesh.ParseCluster("cpu:2")
	if err != nil {
		log.Fatal(err)
	}
	cfg := &autopar.PhaseConfig{UpTo: "cluster", Check: true,
		After: func(p *autopar.Phase, s *autopar.Compilation, _ time.Duration) error {
			fmt.Printf("%-9s B=%d\n", p.Name, s.Microbatches)
			return nil
		}}
	s, err := autopar.Run(context.Background(), buildMLP(), c, autopar.Options{Microbatches: 2}, cfg)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(s.MicroBatch.Value(s.MicroBatch.Leaves(ir.OpInput)[0]).Type, "per micro-batch;", s.Layering.L, "layers")
	// Output:
	// verify    B=0
	// rebatch   B=2
	// precision B=2
	// autodiff  B=2
	// optimizer B=2
	// cluster   B=2
	// f32[8,8] per micro-batch; 2 layers
}
