package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar"
	"github.com/autopar/autopar/mesh"
)

func TestCompileWritesPlanAndPrograms(t *testing.T) {
	dir := t.TempDir()
	var out, errOut bytes.Buffer
	f := compileFlags{cluster: "cpu:2", microbatches: "2", schedule: "1f1b", optimizer: "sgd", out: dir, emit: "programs"}
	require.NoError(t, runCompile(context.Background(), &out, &errOut, "../../testdata/models/mlp-tiny.ir", f))
	assert.Contains(t, out.String(), "step time")
	assert.Contains(t, out.String(), "model-FLOPs utilization")
	assert.Empty(t, errOut.String(), "no progress bar when stderr is not a terminal")
	first, err := os.ReadFile(filepath.Join(dir, "plan.json"))
	require.NoError(t, err)
	progs, err := filepath.Glob(filepath.Join(dir, "programs", "device*.json"))
	require.NoError(t, err)
	assert.Len(t, progs, 2)

	require.NoError(t, runCompile(context.Background(), &out, &errOut, "../../testdata/models/mlp-tiny.ir", f))
	again, err := os.ReadFile(filepath.Join(dir, "plan.json"))
	require.NoError(t, err)
	assert.Equal(t, string(first), string(again), "plan.json is byte-identical run to run")
}

func TestCompileFlagErrors(t *testing.T) {
	var out, errOut bytes.Buffer
	base := compileFlags{cluster: "cpu:2", microbatches: "auto", schedule: "1f1b", optimizer: "sgd"}
	for _, tc := range []struct {
		edit func(*compileFlags)
		want string
	}{
		{func(f *compileFlags) { f.cluster = "tpu-v9" }, "tpu-v9"},
		{func(f *compileFlags) { f.microbatches = "3" }, "not divisible by 3"},
		{func(f *compileFlags) { f.microbatches = "many" }, "--microbatches"},
		{func(f *compileFlags) { f.schedule = "zigzag" }, "--schedule"},
		{func(f *compileFlags) { f.memory = "lots" }, "--memory"},
		{func(f *compileFlags) { f.plan = "tp=4" }, "uses 4 devices"},
	} {
		f := base
		tc.edit(&f)
		err := runCompile(context.Background(), &out, &errOut, "../../testdata/models/mlp-tiny.ir", f)
		require.ErrorContains(t, err, tc.want)
	}
}

func TestRunCheckMatchesSerial(t *testing.T) {
	var out, errOut bytes.Buffer
	f := runFlags{compileFlags: compileFlags{cluster: "cpu:2", microbatches: "2", schedule: "1f1b", optimizer: "sgd"},
		steps: 3, seed: 1, check: true, timeout: 10e9, tol: 1e-4}
	require.NoError(t, runRun(context.Background(), &out, &errOut, "../../testdata/models/mlp-tiny.ir", f))
	ls := losses(t, out.String())
	require.Len(t, ls, 3, out.String())
	assert.Less(t, ls[2], ls[0])
	rels := regexp.MustCompile(`rel ([0-9.e+-]+)`).FindAllStringSubmatch(out.String(), -1)
	require.Len(t, rels, 9)
	for _, m := range rels {
		r, err := strconv.ParseFloat(m[1], 64)
		require.NoError(t, err)
		assert.Less(t, r, 1e-4, out.String())
	}
}

func TestCompileDumpAndTime(t *testing.T) {
	var out, errOut bytes.Buffer
	f := compileFlags{cluster: "cpu:2", microbatches: "1", schedule: "1f1b", optimizer: "sgd", dump: "autodiff", timePasses: true}
	require.NoError(t, runCompile(context.Background(), &out, &errOut, "../../testdata/models/mlp-tiny.ir", f))
	assert.Contains(t, out.String(), "grad.l0.fc.w = ")
	assert.NotContains(t, out.String(), ".m.next", "the optimizer phase runs after autodiff")
	assert.Contains(t, errOut.String(), "phase autodiff")
	assert.NotContains(t, errOut.String(), "phase optimizer", "--dump stops after its phase")
	assert.NotContains(t, out.String(), "step time", "--dump prints no summary")
	f.dump = "nope"
	require.ErrorContains(t, runCompile(context.Background(), &out, &errOut, "../../testdata/models/mlp-tiny.ir", f),
		"expected one of verify, rebatch, precision, autodiff, optimizer, cluster, search, lower")
}

// --time lists every phase of the table, the search and lower included, and the compile
// goes on to its summary; --check verifies after each; --dump shows the later phases too.
func TestCompileTimesEveryPhase(t *testing.T) {
	var out, errOut bytes.Buffer
	f := compileFlags{cluster: "cpu:2", microbatches: "2", schedule: "1f1b", optimizer: "sgd", timePasses: true, checkPhases: true}
	require.NoError(t, runCompile(context.Background(), &out, &errOut, "../../testdata/models/mlp-tiny.ir", f))
	for _, name := range autopar.PhaseNames() {
		assert.Regexp(t, `(?m)^phase `+name+` +[0-9.]+[µnm]?s `, errOut.String(), name)
	}
	assert.Contains(t, errOut.String(), "B=2, the fastest plan")
	assert.Contains(t, out.String(), "step time")

	for dump, want := range map[string]string{"cluster": "layer 0: ", "search": "stage 0: layers 0-", "lower": "device 1\n"} {
		out.Reset()
		f := compileFlags{cluster: "cpu:2", microbatches: "2", schedule: "1f1b", optimizer: "sgd", dump: dump}
		require.NoError(t, runCompile(context.Background(), &out, &errOut, "../../testdata/models/mlp-tiny.ir", f))
		assert.Contains(t, out.String(), "# after "+dump+", B=2", dump)
		assert.Contains(t, out.String(), want, dump)
	}
}

// calibrate writes a cluster JSON that compile and run read back.
func TestCalibrateWritesACluster(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cpu.json")
	var out bytes.Buffer
	require.NoError(t, runCalibrate(context.Background(), &out, calibrateFlags{cluster: "cpu:2", out: path, quick: true}))
	assert.Contains(t, out.String(), "runtime instruction")
	assert.Contains(t, out.String(), "all_reduce     2 devices")
	c, err := mesh.ParseCluster(path)
	require.NoError(t, err)
	assert.Equal(t, 2, c.DevicesPerHost)
	out.Reset()
	var errOut bytes.Buffer
	f := runFlags{compileFlags: compileFlags{cluster: path, microbatches: "1", schedule: "1f1b", optimizer: "sgd"},
		steps: 2, seed: 1, timeout: 10e9, tol: 1e-4}
	require.NoError(t, runRun(context.Background(), &out, &errOut, "../../testdata/models/mlp-tiny.ir", f))
	assert.Regexp(t, `step time: predicted [0-9.]+ .s, measured [0-9.]+ .s CPU time \(measured/predicted [0-9.]+; median of 1 steps: one core per device.*\); wall clock [0-9.]+ .s`, out.String())
	assert.Contains(t, out.String(), "stage  predicted compute  predicted communication  CPU compute  CPU communication  CPU other")
}

func TestCompilePrecision(t *testing.T) {
	var out, errOut bytes.Buffer
	f := compileFlags{cluster: "cpu:2", microbatches: "1", schedule: "1f1b", optimizer: "adam", dump: "optimizer", precision: "mixed"}
	require.NoError(t, runCompile(context.Background(), &out, &errOut, "../../testdata/models/mlp-tiny.ir", f))
	assert.Contains(t, out.String(), "param l0.fc.w: bf16[16,32]")
	assert.Contains(t, out.String(), "state l0.fc.w.rem: f32[16,32]", "the f32 master weight's remainder")
	assert.Contains(t, out.String(), "x.bf16 = cast x to=bf16", "the input is cast on entry")
	f.precision = "fp8"
	require.EqualError(t, runCompile(context.Background(), &out, &errOut, "../../testdata/models/mlp-tiny.ir", f),
		`--precision: unknown precision "fp8", want one of [f32 f16 bf16 mixed mixed-f16]`)
}

// --batch-norm microbatch lets a Wide-ResNet be pipelined in micro-batches; the summary
// says over what its statistics run.
func TestCompileBatchNormMicrobatch(t *testing.T) {
	var out, errOut bytes.Buffer
	f := compileFlags{cluster: "cpu:2", microbatches: "2", schedule: "1f1b", optimizer: "sgd", plan: "tp=1,pp=2,dp=1", batchNorm: "microbatch"}
	require.NoError(t, runCompile(context.Background(), &out, &errOut, "../../testdata/models/wresnet-tiny.ir", f))
	assert.Contains(t, out.String(), "batch 8 in 2 micro-batches (1f1b), batch norm over each micro-batch of 4,")
}

// `run --check` under --batch-norm microbatch checks the programs against the serial step
// of the per-micro-batch model, and a saved plan carries the choice to exec.
func TestRunBatchNormMicrobatch(t *testing.T) {
	model := "../../testdata/models/wresnet-tiny.ir"
	out, err := execute(newRunCmd(), model, "--cluster", "cpu:2", "--microbatches", "2",
		"--batch-norm", "microbatch", "--plan", "tp=1,pp=2,dp=1", "--steps", "2", "--check")
	require.NoError(t, err, out)
	assert.Contains(t, out, "batch norm over each micro-batch of 4")
	assert.Equal(t, 2, strings.Count(out, "check: loss max abs"))

	dir := t.TempDir()
	f := compileFlags{cluster: "cpu:2", microbatches: "2", schedule: "1f1b", optimizer: "sgd", plan: "tp=1,pp=2,dp=1",
		batchNorm: "microbatch", out: dir, emit: "programs"}
	require.NoError(t, runCompile(context.Background(), &bytes.Buffer{}, &bytes.Buffer{}, model, f))
	out, err = execute(newExecCmd(), dir, "--steps", "1", "--check")
	require.NoError(t, err, out)
	assert.Contains(t, out, "check: loss max abs")
}
