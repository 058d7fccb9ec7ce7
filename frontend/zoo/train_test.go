package zoo

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/passes"
	"github.com/autopar/autopar/runtime/interp"
)

// labelClasses is the limit of the graph's label input: the number of classes the loss is
// over.
func labelClasses(t *testing.T, g *ir.Graph) int {
	for _, name := range []string{"labels", "y"} {
		if id, ok := g.Lookup(name); ok {
			return g.Value(id).Attrs.Int("limit")
		}
	}
	t.Fatalf("%s has no labels input", g.Name)
	return 0
}

// TestTinyModelsInitialLoss runs each tiny preset once on the serial interpreter with
// fresh params and random data: the loss must be finite and close to log(classes), the
// loss of a uniform guess, as it is for any sanely initialized classifier. A block that
// blows up activations (a missing normalization, a mask that lets -1e4 through) fails here.
func TestTinyModelsInitialLoss(t *testing.T) {
	for _, name := range []string{"mlp-tiny", "gpt-tiny", "moe-tiny", "wresnet-tiny"} {
		t.Run(name, func(t *testing.T) {
			m, err := NewPreset(name)
			require.NoError(t, err)
			g, err := m.Build()
			require.NoError(t, err)
			feeds := interp.InitParams(g, 1)
			inputs, err := interp.GenerateInputs(g, 2)
			require.NoError(t, err)
			for k, v := range inputs {
				feeds[k] = v
			}
			res, err := interp.Run(context.Background(), g, feeds)
			require.NoError(t, err)
			loss := res.Outputs[0].At(0)
			uniform := math.Log(float64(labelClasses(t, g)))
			t.Logf("%s: loss %.4f, log(classes) %.4f", name, loss, uniform)
			require.False(t, math.IsNaN(loss) || math.IsInf(loss, 0), "loss is %v", loss)
			assert.InDelta(t, uniform, loss, 0.25*uniform)
		})
	}
}

// TestTinyModelsTrain takes a few Adam steps on one fixed batch of each tiny preset: the
// loss must fall (the model can fit what it sees) and each step, forward, backward and
// update on the serial interpreter, must stay cheap enough for the test suite.
func TestTinyModelsTrain(t *testing.T) {
	const steps = 8
	for _, name := range []string{"mlp-tiny", "gpt-tiny", "moe-tiny", "wresnet-tiny"} {
		t.Run(name, func(t *testing.T) {
			m, err := NewPreset(name)
			require.NoError(t, err)
			g, err := m.Build()
			require.NoError(t, err)
			step, err := passes.TrainingStep(g, passes.Optimizer{Kind: "adam", LR: 1e-2})
			require.NoError(t, err)
			feeds := interp.InitParams(step, 1)
			inputs, err := interp.GenerateInputs(step, 2)
			require.NoError(t, err)
			for k, v := range inputs {
				feeds[k] = v
			}
			var losses []float64
			start := time.Now()
			for i := 0; i < steps; i++ {
				res, err := interp.Run(context.Background(), step, feeds)
				require.NoError(t, err)
				losses = append(losses, res.Outputs[0].At(0))
				feeds.Apply(res)
			}
			perStep := time.Since(start) / steps
			t.Logf("%s: losses %.3f, %v per step", name, losses, perStep)
			for _, l := range losses {
				require.False(t, math.IsNaN(l) || math.IsInf(l, 0), "losses %v", losses)
			}
			assert.Less(t, losses[steps-1], 0.8*losses[0], "the loss must fall on a fixed batch")
		})
	}
}
