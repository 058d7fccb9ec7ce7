package interp_test

import (
	"context"
	"os"
	"testing"

	"github.com/autopar/autopar/frontend"
	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/passes"
	"github.com/autopar/autopar/runtime/interp"
	"github.com/stretchr/testify/require"
)

const gptTiny = "../../testdata/models/gpt-tiny.ir"

// loadStep parses a model and makes its Adam training step; it skips when the model file
// is absent.
func loadStep(tb testing.TB, path string) (fwd, step *ir.Graph) {
	tb.Helper()
	if _, err := os.Stat(path); err != nil {
		tb.Skipf("%s: %v", path, err)
	}
	fwd, err := frontend.ParseFile(path)
	require.NoError(tb, err)
	step, err = passes.TrainingStep(fwd, passes.Optimizer{Kind: "adam", LR: 1e-2})
	require.NoError(tb, err)
	return fwd, step
}

// TestTrainGPTTiny runs the whole serial stack on the bundled tiny GPT: the loss of a fixed
// batch must fall step after step, and two runs from the same seed must agree bit for bit.
func TestTrainGPTTiny(t *testing.T) {
	_, step := loadStep(t, gptTiny)
	train := func() []float64 {
		f := interp.InitParams(step, 1)
		in, err := interp.GenerateInputs(step, 2)
		require.NoError(t, err)
		for k, v := range in {
			f[k] = v
		}
		var losses []float64
		for range 5 {
			r, err := interp.Run(context.Background(), step, f)
			require.NoError(t, err)
			losses = append(losses, r.Outputs[0].At(0))
			f.Apply(r)
		}
		return losses
	}
	losses := train()
	for i := 1; i < len(losses); i++ {
		require.Less(t, losses[i], losses[i-1], "loss must fall on a fixed batch: %v", losses)
	}
	require.Equal(t, losses, train())
}

// TestRecyclingMatchesKeepAll: Run recycles freed buffers, RunKeep frees nothing; the loss,
// every output and every update must come out bit-identical.
func TestRecyclingMatchesKeepAll(t *testing.T) {
	_, step := loadStep(t, gptTiny)
	f := interp.InitParams(step, 3)
	in, err := interp.GenerateInputs(step, 4)
	require.NoError(t, err)
	for k, v := range in {
		f[k] = v
	}
	a, err := interp.Run(context.Background(), step, f)
	require.NoError(t, err)
	b, err := interp.RunKeep(context.Background(), step, f)
	require.NoError(t, err)
	require.Equal(t, len(b.Outputs), len(a.Outputs))
	for i := range a.Outputs {
		require.Equal(t, b.Outputs[i], a.Outputs[i], "output %d", i)
	}
	require.Equal(t, b.Updates, a.Updates)
	freed := 0
	for _, v := range a.Values {
		if v == nil {
			freed++
		}
	}
	require.Greater(t, freed, len(a.Values)/2, "most values are freed")
}
