package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The example trains: over a few steps on four devices the loss falls well below where it
// started (ln 128 ≈ 4.85 for a uniform guess), and every step prints it. Those six steps
// equal three there, saved, then three resumed on two devices under the plan autopar
// picks for them.
func TestTrainLossFallsAndResumes(t *testing.T) {
	c := defaultConfig()
	c.steps, c.stageLayers = 6, 1 // one layer range: the fastest stage search, same model
	var out bytes.Buffer
	losses, err := train(context.Background(), &out, c)
	require.NoError(t, err)
	require.Len(t, losses, c.steps)
	assert.Equal(t, c.steps, strings.Count(out.String(), "loss "), out.String())
	assert.Contains(t, out.String(), "stage 0: layers 0-")
	for i := 1; i < len(losses); i++ {
		assert.Less(t, losses[i], losses[i-1], "step %d: %v", i+1, losses)
	}
	assert.Less(t, losses[c.steps-1], 0.8*losses[0], "%v", losses)

	c.steps, c.save = 3, filepath.Join(t.TempDir(), "gpt.safetensors")
	first, err := train(context.Background(), &bytes.Buffer{}, c)
	require.NoError(t, err)
	c.cluster, c.resume, c.save = "cpu:2", c.save, ""
	out.Reset()
	second, err := train(context.Background(), &out, c)
	require.NoError(t, err)
	assert.Contains(t, out.String(), "step   4  loss")
	got := append(first, second...)
	for i := range losses {
		assert.InEpsilon(t, losses[i], got[i], 1e-5, "step %d", i+1)
	}
}

func TestBuildGPTErrors(t *testing.T) {
	c := defaultConfig()
	c.heads = 5
	_, err := buildGPT(c)
	require.ErrorContains(t, err, "5 heads do not divide hidden 64")

	c = defaultConfig()
	c.cluster = "cpu:3x"
	_, err = train(context.Background(), &bytes.Buffer{}, c)
	require.Error(t, err)
}
