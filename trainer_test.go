package autopar

import (
	"context"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/codegen"
	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/passes"
	"github.com/autopar/autopar/program"
	"github.com/autopar/autopar/runtime"
	"github.com/autopar/autopar/runtime/interp"
	"github.com/autopar/autopar/runtime/kernels"
)

// batchOf returns step's random data for every data input of g, as a Batch.
func stepBatch(t testing.TB, g *ir.Graph, step int) Batch {
	t.Helper()
	data, err := interp.GenerateInputs(g, int64(100+step))
	require.NoError(t, err)
	b := Batch{}
	for name, x := range data {
		b[name] = x
	}
	return b
}

// TestTrainerResumesUnderAnotherPlan trains 10 steps under plan A, saving after step 5,
// then resumes the checkpoint under plan B (other degrees, other device count) for steps
// 6–10: the losses and the final params equal the uninterrupted run's.
func TestTrainerResumesUnderAnotherPlan(t *testing.T) {
	sgd := passes.Optimizer{Kind: "sgd", LR: 0.1, Momentum: 0.9}
	adam := passes.Optimizer{Kind: "adam", LR: 0.01}
	// gpt-tiny's attention key bias has a zero gradient in exact arithmetic, so each run
	// holds rounding noise there, which Adam with a tiny eps scales up to ±lr: a larger eps
	// keeps the noise at its size.
	adamGPT := passes.Optimizer{Kind: "adam", LR: 0.01, Eps: 1e-3}
	cases := []struct {
		model  string
		opt    passes.Optimizer
		a, b   string
		ma, mb *Manual
	}{
		{"mlp-tiny", sgd, "cpu:4", "cpu:2", &Manual{TP: 2, PP: 2, DP: 1}, &Manual{TP: 1, PP: 1, DP: 2}},
		{"mlp-tiny", adam, "cpu:2", "cpu:1", &Manual{TP: 1, PP: 2, DP: 1}, nil},
		{"gpt-tiny", sgd, "cpu:4", "cpu:2", &Manual{TP: 2, PP: 2, DP: 1}, &Manual{TP: 1, PP: 1, DP: 2}},
		{"gpt-tiny", adamGPT, "cpu:2", "cpu:4", &Manual{TP: 2, PP: 1, DP: 1}, &Manual{TP: 1, PP: 2, DP: 2}},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%s/%s/%s-to-%s", tc.model, tc.opt.Kind, tc.ma, tc.mb), func(t *testing.T) {
			ctx := context.Background()
			g := model(t, tc.model)
			planA := compile(t, g, cluster(t, tc.a), Options{Microbatches: 2, Layers: 2, Manual: tc.ma, Optimizer: tc.opt})
			planB := compile(t, g, cluster(t, tc.b), Options{Microbatches: 2, Layers: 2, Manual: tc.mb, Optimizer: tc.opt})
			ckpt := filepath.Join(t.TempDir(), "ck.safetensors")

			ta, err := NewTrainer(ctx, planA, TrainerOptions{Seed: 7, CheckSerial: true})
			require.NoError(t, err)
			var lossA []float64
			for step := 1; step <= 10; step++ {
				loss, err := ta.Step(ctx, stepBatch(t, g, step))
				require.NoError(t, err)
				lossA = append(lossA, loss)
				if step == 5 {
					require.NoError(t, ta.Save(ckpt))
				}
			}
			wantParams, err := ta.State()
			require.NoError(t, err)

			ck, err := LoadCheckpoint(ckpt)
			require.NoError(t, err)
			assert.Equal(t, 5, ck.Step)
			tb, err := NewTrainer(ctx, planB, TrainerOptions{Checkpoint: ck})
			require.NoError(t, err)
			for step := 6; step <= 10; step++ {
				loss, err := tb.Step(ctx, stepBatch(t, g, step))
				require.NoError(t, err)
				assert.InEpsilon(t, lossA[step-1], loss, 1e-5, "step %d loss", step)
			}
			assert.Equal(t, 10, tb.Steps())
			got, err := tb.State()
			require.NoError(t, err)
			require.Len(t, got, len(wantParams))
			assert.NoError(t, tb.compare(got, wantParams, 1e-4), "params and state after step 10")
		})
	}
}

func TestTrainerRejectsBadBatches(t *testing.T) {
	ctx := context.Background()
	g := model(t, "mlp-tiny")
	plan := compile(t, g, cluster(t, "cpu:2"), Options{Microbatches: 2, Layers: 2, Manual: &Manual{TP: 2, PP: 1, DP: 1}})
	tr, err := NewTrainer(ctx, plan, TrainerOptions{Seed: 1})
	require.NoError(t, err)
	before, err := tr.Params()
	require.NoError(t, err)
	x := make([]float32, 16*16)
	y := make([]int32, 16)
	for _, tc := range []struct {
		name  string
		batch Batch
		want  string
	}{
		{"missing", Batch{"x": x}, "the batch has no input y, expected i32[16]"},
		{"unknown", Batch{"x": x, "y": y, "z": x}, "the batch has z, which is not a data input of mlp (inputs: x: f32[16,16], y: i32[16])"},
		{"short", Batch{"x": x[:10], "y": y}, "input x is []float32 of 10 elements, expected f32[16,16] (256 elements)"},
		{"dtype", Batch{"x": x, "y": make([]float32, 16)}, "input y is []float32 of 16 elements, expected i32[16] (16 elements)"},
		{"tensor", Batch{"x": kernels.New(ir.Type{DType: ir.F32, Shape: ir.Shape{16, 8}}), "y": y}, "input x is a tensor of f32[16,8], expected f32[16,16]"},
		{"type", Batch{"x": "data", "y": y}, "input x is a string, expected f32[16,16]"},
		{"label", Batch{"x": x, "y": append(make([]int32, 15), 10)}, "input y holds 10 at element 15, expected values in [0, 10) (its limit)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tr.Step(ctx, tc.batch)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	assert.Equal(t, 0, tr.Steps())
	after, err := tr.Params()
	require.NoError(t, err)
	assert.Equal(t, before, after, "a refused batch changes nothing")
	loss, err := tr.Step(ctx, Batch{"x": x, "y": y})
	require.NoError(t, err)
	assert.InDelta(t, math.Log(10), loss, 1e-6, "zero inputs and zero biases: uniform logits")
}

func TestCheckpointErrors(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	mlp := compile(t, model(t, "mlp-tiny"), cluster(t, "cpu:1"), Options{Microbatches: 1, Layers: 1})
	tr, err := NewTrainer(ctx, mlp, TrainerOptions{Seed: 1})
	require.NoError(t, err)
	good := filepath.Join(dir, "good.safetensors")
	require.NoError(t, tr.Save(good))
	data, err := os.ReadFile(good)
	require.NoError(t, err)

	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, b, 0o644))
		return p
	}
	flipped := append([]byte{}, data...)
	flipped[len(flipped)-3] ^= 0x40
	for _, tc := range []struct {
		path, want string
	}{
		{write("trunc.safetensors", data[:len(data)-100]), "do not hold"},
		{write("short.safetensors", data[:5]), "shorter than the 8-byte header"},
		{write("flip.safetensors", flipped), "the file is corrupt"},
		{filepath.Join(dir, "none.safetensors"), "no such file"},
	} {
		_, err := LoadCheckpoint(tc.path)
		require.Error(t, err, tc.path)
		assert.Contains(t, err.Error(), tc.want)
		assert.Contains(t, err.Error(), tc.path)
	}

	// Another model's checkpoint, and another optimizer's, are refused by NewTrainer.
	ck, err := LoadCheckpoint(good)
	require.NoError(t, err)
	gpt := compile(t, model(t, "gpt-tiny"), cluster(t, "cpu:1"), Options{Microbatches: 1, Layers: 1})
	_, err = NewTrainer(ctx, gpt, TrainerOptions{Checkpoint: ck})
	require.ErrorContains(t, err, "checkpoint: it belongs to model mlp")
	adam := compile(t, model(t, "mlp-tiny"), cluster(t, "cpu:1"), Options{Microbatches: 1, Layers: 1, Optimizer: passes.Optimizer{Kind: "adam", LR: 0.01}})
	_, err = NewTrainer(ctx, adam, TrainerOptions{Checkpoint: ck})
	require.ErrorContains(t, err, "checkpoint: it was trained with optimizer")

	// A failed save leaves the checkpoint already there as it was.
	require.NoError(t, os.Mkdir(good+".tmp", 0o755))
	_, err = tr.Step(ctx, stepBatch(t, mlp.Forward(), 1))
	require.NoError(t, err)
	require.Error(t, tr.Save(good))
	again, err := os.ReadFile(good)
	require.NoError(t, err)
	assert.Equal(t, data, again, "nothing overwritten")
}

// TestTrainerKeepsStateOnDevices: a Trainer step loads only the data from the host and
// stores only the loss there, while runtime.Run on the same programs loads every param
// and state block too; the collectives move what the plan predicts in both.
func TestTrainerKeepsStateOnDevices(t *testing.T) {
	ctx := context.Background()
	g := model(t, "mlp-tiny")
	opt := passes.Optimizer{Kind: "adam", LR: 0.01}
	plan := compile(t, g, cluster(t, "cpu:4"), Options{Microbatches: 2, Layers: 2, Manual: &Manual{TP: 2, PP: 1, DP: 2}, Optimizer: opt})
	tr, err := NewTrainer(ctx, plan, TrainerOptions{Seed: 3})
	require.NoError(t, err)
	assert.Empty(t, tr.Hosted())
	batch := stepBatch(t, g, 1)
	_, err = tr.Step(ctx, batch)
	require.NoError(t, err)

	progs, err := plan.Programs()
	require.NoError(t, err)
	full, err := passes.TrainingStep(g, opt)
	require.NoError(t, err)
	feeds := interp.InitParams(full, 3)
	state := map[string]bool{}
	for name := range feeds {
		state[name] = true
	}
	for name, x := range batch {
		feeds[name] = x.(*kernels.Tensor)
	}
	ran, err := runtime.Run(ctx, progs, runtime.Data(feeds), runtime.Options{})
	require.NoError(t, err)
	predicted := codegen.Predict(nil, progs)
	for i, p := range progs {
		var stateBytes int64
		for _, in := range p.Instrs {
			if in.Kind == program.Load && state[in.Name] {
				stateBytes += p.Buffers[in.Out].Type.Bytes()
			}
		}
		got, old := tr.LastResult().Devices[i], ran.Devices[i]
		assert.Positive(t, stateBytes)
		assert.Equal(t, old.FeedBytes-stateBytes, got.FeedBytes, "device %d loads only data", p.Device)
		assert.LessOrEqual(t, got.StoreBytes, int64(4), "device %d stores at most the loss", p.Device)
		assert.Greater(t, old.StoreBytes, stateBytes/2, "Run gathers the params and state")
		assert.Equal(t, predicted[i].BytesSent, got.BytesSent, "device %d", p.Device)
		assert.Equal(t, old.BytesSent, got.BytesSent, "device %d", p.Device)
	}
}

func TestSessionErrors(t *testing.T) {
	plan := compile(t, model(t, "mlp-tiny"), cluster(t, "cpu:2"), Options{Microbatches: 1, Layers: 2})
	progs, err := plan.Programs()
	require.NoError(t, err)
	full, err := passes.TrainingStep(plan.Forward(), plan.Optimizer.Optimizer())
	require.NoError(t, err)
	init := runtime.Data(interp.InitParams(full, 1))

	bad := maps.Clone(init)
	bad["x"] = kernels.New(ir.Type{DType: ir.F32, Shape: ir.Shape{16, 16}})
	_, err = runtime.NewSession(progs, bad, runtime.Options{})
	require.ErrorContains(t, err, "x is not both loaded and stored by the programs")

	bad = maps.Clone(init)
	delete(bad, "l0.fc.w")
	_, err = runtime.NewSession(progs, bad, runtime.Options{})
	require.ErrorContains(t, err, "the programs load and store l0.fc.w, expected its initial value")

	bad = maps.Clone(init)
	bad["l0.fc.w"] = kernels.New(ir.Type{DType: ir.F32, Shape: ir.Shape{16, 31}})
	_, err = runtime.NewSession(progs, bad, runtime.Options{})
	require.ErrorContains(t, err, "l0.fc.w is f32[16,31], expected f32[16,32]")

	s, err := runtime.NewSession(progs, init, runtime.Options{})
	require.NoError(t, err)
	_, err = s.Step(context.Background(), runtime.Data{"l0.fc.w": init["l0.fc.w"]})
	require.ErrorContains(t, err, "feed l0.fc.w is resident on the devices")
	_, err = s.Step(context.Background(), runtime.Data{})
	require.ErrorContains(t, err, `no feed named "x"`)
	got, err := s.Gather(context.Background())
	require.NoError(t, err)
	assert.Equal(t, init["l0.fc.w"], got["l0.fc.w"], "a failed step leaves the state as it was")
}

// TestTrainerHostsNothing: under data-, tensor- and pipeline-parallel plans of the zoo's
// MLP, GPT (tied embedding: read replicated, updated sharded under tp; read on the first
// and last stage under pp) and MoE, no param or state goes through the host: every device
// loads from the host only its blocks of the data inputs and stores there only the loss.
func TestTrainerHostsNothing(t *testing.T) {
	ctx := context.Background()
	// SGD with momentum, not Adam: Adam scales the rounding noise of a gradient that is zero
	// in exact arithmetic (attention's key bias) to the learning rate, past any tolerance.
	opt := passes.Optimizer{Kind: "sgd", LR: 0.1, Momentum: 0.9}
	type tc struct {
		model, cluster string
		man            *Manual
	}
	cases := []tc{
		{"mlp-tiny", "cpu:4", &Manual{TP: 2, PP: 1, DP: 2}},
		{"gpt-tiny", "cpu:2", &Manual{TP: 1, PP: 2, DP: 1}},
		{"gpt-tiny", "cpu:4", &Manual{TP: 2, PP: 2, DP: 1}},
		{"gpt-tiny", "cpu:4", &Manual{TP: 2, PP: 1, DP: 2}},
		{"moe-tiny", "cpu:4", &Manual{TP: 2, PP: 2, DP: 1}},
	}
	if !testing.Short() {
		cases = append(cases, tc{"mlp-tiny", "cpu:2", &Manual{TP: 1, PP: 2, DP: 1}}, tc{"moe-tiny", "cpu:2", &Manual{TP: 2, PP: 1, DP: 1}})
	}
	for _, c := range cases {
		t.Run(c.model+"/"+c.man.String(), func(t *testing.T) {
			g := model(t, c.model)
			mb := 1
			if c.man.PP > 1 {
				mb = 2
			}
			plan := compile(t, g, cluster(t, c.cluster), Options{Microbatches: mb, Layers: c.man.PP, Manual: c.man, Optimizer: opt})
			checked, err := NewTrainer(ctx, plan, TrainerOptions{Seed: 1, CheckSerial: true})
			require.NoError(t, err)
			tr, err := NewTrainer(ctx, plan, TrainerOptions{Seed: 1})
			require.NoError(t, err)
			assert.Empty(t, tr.Hosted())
			for step := 1; step <= 2; step++ {
				_, err = checked.Step(ctx, stepBatch(t, g, step))
				require.NoError(t, err, "the programs equal the serial step")
				_, err = tr.Step(ctx, stepBatch(t, g, step))
				require.NoError(t, err)
			}
			progs, err := plan.Programs()
			require.NoError(t, err)
			inputs := tr.Inputs()
			for i, p := range progs {
				var data int64
				for _, in := range p.Instrs {
					if _, ok := inputs[in.Name]; ok && in.Kind == program.Load {
						data += p.Buffers[in.Out].Type.Bytes() * int64(plan.Microbatches)
					}
				}
				got := tr.LastResult().Devices[i]
				assert.Equal(t, data, got.FeedBytes, "device %d loads only its blocks of the data", p.Device)
				assert.LessOrEqual(t, got.StoreBytes, int64(4), "device %d stores at most the loss", p.Device)
			}
		})
	}
}
