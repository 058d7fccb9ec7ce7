package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// autopar run --save under tp=2,pp=2 on 4 devices, then --resume under dp=2 on 2: the
// resumed steps print the losses of the uninterrupted run.
func TestRunSaveResumeAcrossPlans(t *testing.T) {
	const model = "../../testdata/models/mlp-tiny.ir"
	ck := filepath.Join(t.TempDir(), "ck.safetensors")
	flags := func(cluster, plan string, steps int) runFlags {
		return runFlags{compileFlags: compileFlags{cluster: cluster, plan: plan, microbatches: "2", schedule: "1f1b", optimizer: "adam"},
			steps: steps, seed: 1, timeout: 10e9, tol: 1e-4}
	}
	var whole, first, second bytes.Buffer
	require.NoError(t, runRun(context.Background(), &whole, &bytes.Buffer{}, model, flags("cpu:4", "tp=2,pp=2,dp=1", 6)))
	f := flags("cpu:4", "tp=2,pp=2,dp=1", 3)
	f.save, f.saveEvery = ck, 2
	require.NoError(t, runRun(context.Background(), &first, &bytes.Buffer{}, model, f))
	assert.Contains(t, first.String(), "saved "+ck+" at step 2")
	assert.Contains(t, first.String(), "saved "+ck+" at step 3")
	f = flags("cpu:2", "dp=2", 3)
	f.resume = ck
	require.NoError(t, runRun(context.Background(), &second, &bytes.Buffer{}, model, f))
	assert.Contains(t, second.String(), "resumed "+ck+" at step 3")
	want := losses(t, whole.String())
	got := append(losses(t, first.String()), losses(t, second.String())...)
	require.Len(t, got, 6, second.String())
	for i := range want {
		assert.InDelta(t, want[i], got[i], 2e-6, "step %d", i+1)
	}

	// A corrupt checkpoint is refused before anything runs; --save-every needs --save.
	data, err := os.ReadFile(ck)
	require.NoError(t, err)
	bad := filepath.Join(t.TempDir(), "bad.safetensors")
	require.NoError(t, os.WriteFile(bad, data[:len(data)/2], 0o644))
	f.resume = bad
	require.ErrorContains(t, runRun(context.Background(), &bytes.Buffer{}, &bytes.Buffer{}, model, f), bad)
	f = flags("cpu:1", "", 1)
	f.saveEvery = 2
	require.ErrorContains(t, runRun(context.Background(), &bytes.Buffer{}, &bytes.Buffer{}, model, f), "--save-every 2 needs --save FILE")
	f = flags("cpu:2", "dp=2", 1)
	f.resume, f.optimizer = ck, "sgd"
	require.ErrorContains(t, runRun(context.Background(), &bytes.Buffer{}, &bytes.Buffer{}, model, f), "it was trained with optimizer")
}
