package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar"
	"github.com/autopar/autopar/runtime/mpi"
)

// mainEnv makes the test binary act as autopar itself (its arguments are autopar's), so
// that the tests can start it under mpirun without building the command first.
const mainEnv = "AUTOPAR_TEST_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(mainEnv) != "" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// compileTo compiles mlp-tiny on cpu:2 as a 2-stage pipeline into a fresh directory with
// its programs.
func compileTo(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	f := compileFlags{cluster: "cpu:2", microbatches: "2", schedule: "1f1b", optimizer: "sgd", plan: "pp=2", out: dir, emit: "programs"}
	var out, errOut bytes.Buffer
	require.NoError(t, runCompile(context.Background(), &out, &errOut, "../../testdata/models/mlp-tiny.ir", f))
	return dir
}

var lossLine = regexp.MustCompile(`(?m)^step +\d+ +loss \S+`)

func TestExecRunsSavedPrograms(t *testing.T) {
	dir := compileTo(t)
	var out, errOut bytes.Buffer
	f := stepFlags{steps: 2, seed: 1, check: true, tol: 1e-4, timeout: time.Minute, transport: "inproc"}
	require.NoError(t, runExec(context.Background(), &out, &errOut, dir, f))
	require.Len(t, lossLine.FindAllString(out.String(), -1), 2, out.String())
	require.Contains(t, out.String(), "check: loss max abs")
	require.Regexp(t, `(?m)^ +1 .* equal$`, out.String(), "counters equal the prediction")

	require.NoError(t, os.Rename(filepath.Join(dir, "programs", "device1.json"), filepath.Join(dir, "programs", "device2.json")))
	err := runExec(context.Background(), &out, &errOut, dir, f)
	require.ErrorContains(t, err, "expected device1.json")
	err = runExec(context.Background(), &out, &errOut, t.TempDir(), f)
	require.ErrorContains(t, err, "plan.json")
	f.transport = "tcp"
	require.ErrorContains(t, runExec(context.Background(), &out, &errOut, dir, f), `--transport "tcp": expected inproc, mpi or auto`)
}

// Under mpirun, run --transport mpi and exec give the in-process run's losses, digit for
// digit, and counters equal to the prediction.
func TestMPIRunAndExec(t *testing.T) {
	if !mpi.Available() {
		t.Skip("built without MPI: install Open MPI (make deps) and test with -tags mpi (make test does)")
	}
	bin, err := exec.LookPath("mpirun")
	if err != nil {
		t.Skip("mpirun not found: install openmpi-bin (make deps)")
	}
	model := "../../testdata/models/mlp-tiny.ir"
	var want bytes.Buffer
	rf := runFlags{compileFlags: compileFlags{cluster: "cpu:2", microbatches: "2", schedule: "1f1b", optimizer: "sgd", plan: "pp=2"}, tol: 1e-4,
		steps: 2, seed: 1, timeout: time.Minute, transport: "inproc"}
	require.NoError(t, runRun(context.Background(), &want, &bytes.Buffer{}, model, rf))
	wantLoss := lossLine.FindAllString(want.String(), -1)
	require.Len(t, wantLoss, 2)
	dir := compileTo(t)
	for _, args := range [][]string{
		{"run", model, "--cluster", "cpu:2", "--microbatches", "2", "--plan", "pp=2", "--steps", "2", "--check", "--transport", "mpi"},
		{"exec", dir, "--steps", "2", "--check", "--save", filepath.Join(dir, "ck.safetensors")},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		cmd := exec.CommandContext(ctx, bin, append([]string{"-np", "2", "--oversubscribe", "--bind-to", "none", os.Args[0]}, args...)...)
		cmd.Env = append(os.Environ(), mainEnv+"=1", "OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
		out, err := cmd.CombinedOutput()
		cancel()
		require.NoError(t, err, "mpirun autopar %s:\n%s", strings.Join(args, " "), out)
		got := lossLine.FindAllString(string(out), -1)
		require.Equal(t, stripTimes(wantLoss), stripTimes(got), "autopar %s", args[0])
		require.Equal(t, 1, strings.Count(string(out), "running 2 programs on 2 MPI ranks"), "only rank 0 prints:\n%s", out)
		require.Equal(t, 2, strings.Count(string(out), "check: loss max abs"))
		require.Regexp(t, `(?m)^ +1 .* equal$`, string(out), "counters equal the prediction")
	}
	ck, err := autopar.LoadCheckpoint(filepath.Join(dir, "ck.safetensors"))
	require.NoError(t, err, "rank 0 saved the checkpoint the ranks gathered")
	require.Equal(t, 2, ck.Step)
}

// A rank started with other flags than rank 0's (mpirun's MPMD form gives each its own
// command line) is refused before the first step, naming it.
func TestMPIRunRefusesADifferentRank(t *testing.T) {
	if !mpi.Available() {
		t.Skip("built without MPI: install Open MPI (make deps) and test with -tags mpi (make test does)")
	}
	bin, err := exec.LookPath("mpirun")
	if err != nil {
		t.Skip("mpirun not found: install openmpi-bin (make deps)")
	}
	run := func(seed string) []string {
		return []string{"-np", "1", os.Args[0], "run", "../../testdata/models/mlp-tiny.ir", "--cluster", "cpu:2", "--steps", "1", "--seed", seed}
	}
	args := append(append(run("1"), ":"), run("2")...)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"--oversubscribe", "--bind-to", "none"}, args...)...)
	cmd.Env = append(os.Environ(), mainEnv+"=1", "OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
	out, err := cmd.CombinedOutput()
	require.Error(t, err, "%s", out)
	require.Contains(t, string(out), "rank 1 started with model and flags")
	require.Contains(t, string(out), "refusing to start")
	require.NotContains(t, string(out), "step    1", "refused before the first step")
}

func stripTimes(lines []string) []string {
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = fmt.Sprint(strings.Fields(l))
	}
	return out
}
