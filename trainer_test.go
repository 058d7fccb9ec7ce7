package autopar

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/passes"
	"github.com/autopar/autopar/runtime/interp"
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
