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

const mlpTiny = "../../testdata/models/mlp-tiny.ir"

func compileInto(t *testing.T, ctx context.Context, dir, cluster, emit string) error {
	t.Helper()
	var out, errOut bytes.Buffer
	f := compileFlags{cluster: cluster, microbatches: "2", schedule: "1f1b", optimizer: "sgd", out: dir, emit: emit}
	return runCompile(ctx, &out, &errOut, mlpTiny, f)
}

func programFiles(t *testing.T, dir string) []string {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, programsDir, "*"))
	require.NoError(t, err)
	for i, n := range names {
		names[i] = filepath.Base(n)
	}
	return names
}

// Recompiling for fewer devices leaves no stale programs, and no temporary directory.
func TestOutputDirIsReplacedWhole(t *testing.T) {
	parent := t.TempDir()
	dir := filepath.Join(parent, "out")
	require.NoError(t, compileInto(t, context.Background(), dir, "cpu:4", "programs"))
	assert.Len(t, programFiles(t, dir), 8)
	require.NoError(t, compileInto(t, context.Background(), dir, "cpu:2", "programs"))
	assert.Equal(t, []string{"device0.json", "device0.txt", "device1.json", "device1.txt"}, programFiles(t, dir))
	require.NoError(t, compileInto(t, context.Background(), dir, "cpu:2", ""))
	assert.Empty(t, programFiles(t, dir), "a compile without --emit programs drops the old programs")
	assert.FileExists(t, filepath.Join(dir, planFile))
	entries, err := os.ReadDir(parent)
	require.NoError(t, err)
	require.Len(t, entries, 1, "no temporary directory is left beside the output")
	info, err := os.Stat(dir)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o755), info.Mode().Perm())
}

// A directory with the user's files is refused before compiling, and nothing in it changes.
func TestOutputDirWithOtherFilesIsRefused(t *testing.T) {
	dir := t.TempDir()
	notes := filepath.Join(dir, "notes.txt")
	require.NoError(t, os.WriteFile(notes, []byte("mine"), 0o644))
	err := compileInto(t, context.Background(), dir, "cpu:2", "programs")
	require.ErrorContains(t, err, "-o "+dir+": the directory holds files autopar did not write (notes.txt)")
	data, err := os.ReadFile(notes)
	require.NoError(t, err)
	assert.Equal(t, "mine", string(data))
	assert.NoFileExists(t, filepath.Join(dir, planFile))

	require.NoError(t, os.Remove(notes))
	require.NoError(t, os.MkdirAll(filepath.Join(dir, programsDir), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, programsDir, "keep.go"), nil, 0o644))
	require.ErrorContains(t, compileInto(t, context.Background(), dir, "cpu:2", ""), "(programs/keep.go)")

	file := filepath.Join(t.TempDir(), "plan")
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	require.ErrorContains(t, compileInto(t, context.Background(), file, "cpu:2", ""), "-o "+file+": not a directory")
}

// --emit is checked before any work: a bad value, or programs without -o.
func TestEmitCheckedFirst(t *testing.T) {
	var out, errOut bytes.Buffer
	f := compileFlags{cluster: "cpu:2", microbatches: "auto", schedule: "1f1b", optimizer: "sgd", out: t.TempDir(), emit: "program"}
	require.EqualError(t, runCompile(context.Background(), &out, &errOut, "nope.ir", f), `--emit "program": expected programs`)
	f.out = ""
	f.emit = "programs"
	require.EqualError(t, runCompile(context.Background(), &out, &errOut, "nope.ir", f), "--emit programs writes files into the output directory: give -o DIR")
}

// A cancelled write leaves the old directory as it was; errors name the user's path.
func TestWritePlanDirCancelAndErrors(t *testing.T) {
	parent := t.TempDir()
	dir := filepath.Join(parent, "out")
	require.NoError(t, compileInto(t, context.Background(), dir, "cpu:4", "programs"))
	before := programFiles(t, dir)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, plan, err := compileModel(context.Background(), &bytes.Buffer{}, mlpTiny,
		compileFlags{cluster: "cpu:2", microbatches: "2", schedule: "1f1b", optimizer: "sgd"})
	require.NoError(t, err)
	require.ErrorIs(t, writePlanDir(ctx, dir, plan, true), context.Canceled)
	assert.Equal(t, before, programFiles(t, dir))
	entries, err := os.ReadDir(parent)
	require.NoError(t, err)
	assert.Len(t, entries, 1)

	err = writePlanDir(context.Background(), "/proc/nope/out", plan, false)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "/proc/nope/out")
	assert.NotContains(t, err.Error(), ".autopar-")
}
