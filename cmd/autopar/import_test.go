package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/frontend"
	"github.com/autopar/autopar/frontend/onnx"
	"github.com/autopar/autopar/runtime/kernels"
	"github.com/autopar/autopar/safetensors"
)

// The acceptance test of issue 17's import half: autopar import gpt2-tiny.onnx -o g.ir,
// then autopar run g.ir --check from the imported weights.
func TestImportThenRunChecked(t *testing.T) {
	dir := t.TempDir()
	ir := filepath.Join(dir, "g.ir")
	var out bytes.Buffer
	require.NoError(t, runImport(&out, "../../testdata/onnx/gpt2-tiny.onnx", importFlags{out: ir}))
	assert.Contains(t, out.String(), "29 params")

	// The .ir parses, and the weights file holds exactly the importer's weights.
	g, err := frontend.ParseFile(ir)
	require.NoError(t, err)
	m, err := onnx.ImportFile("../../testdata/onnx/gpt2-tiny.onnx", onnx.Options{})
	require.NoError(t, err)
	w, meta, err := safetensors.ReadFile(filepath.Join(dir, "g.safetensors"))
	require.NoError(t, err)
	assert.Equal(t, "../../testdata/onnx/gpt2-tiny.onnx", meta["source"])
	require.Len(t, w, len(m.Weights))
	for name, want := range m.Weights {
		require.Equal(t, want.F32, w[name].F32, name)
	}
	_, err = safetensors.Apply(g, map[string]*kernels.Tensor{}, w)
	require.NoError(t, err)

	out.Reset()
	f := runFlags{compileFlags: compileFlags{cluster: "cpu:2", microbatches: "2", schedule: "1f1b", optimizer: "sgd", layers: 2}, tol: 1e-4,
		steps: 2, seed: 1, check: true, timeout: 10e9, weights: filepath.Join(dir, "g.safetensors")}
	require.NoError(t, runRun(context.Background(), &out, &bytes.Buffer{}, ir, f))
	rels := regexp.MustCompile(`rel ([0-9.e+-]+)`).FindAllStringSubmatch(out.String(), -1)
	require.Len(t, rels, 6, out.String())
	for _, m := range rels {
		r, err := strconv.ParseFloat(m[1], 64)
		require.NoError(t, err)
		assert.Less(t, r, 1e-4, out.String())
	}
}

func TestImportErrorsCLI(t *testing.T) {
	dir := t.TempDir()
	var out bytes.Buffer
	err := runImport(&out, "../../testdata/onnx/mlp.onnx", importFlags{out: filepath.Join(dir, "m.ir")})
	require.ErrorContains(t, err, "--loss cross-entropy --labels NAME")
	err = runImport(&out, "../../testdata/onnx/mlp.onnx", importFlags{out: filepath.Join(dir, "m.txt")})
	require.ErrorContains(t, err, "want a .ir file")
	err = runImport(&out, "../../testdata/onnx/gpt2-tiny-dynamic.onnx", importFlags{out: filepath.Join(dir, "d.ir")})
	require.ErrorContains(t, err, "--batch N")
	f := importFlags{out: filepath.Join(dir, "d.ir")}
	f.opts.Batch = 4
	require.NoError(t, runImport(&out, "../../testdata/onnx/gpt2-tiny-dynamic.onnx", f))
	src, err := os.ReadFile(filepath.Join(dir, "d.ir"))
	require.NoError(t, err)
	assert.Contains(t, string(src), "input ids: i64[4,8] batch=0 limit=64")

	bad := filepath.Join(dir, "bad.safetensors")
	require.NoError(t, os.WriteFile(bad, []byte("nope"), 0o644))
	rf := runFlags{compileFlags: compileFlags{cluster: "cpu:1", microbatches: "1", schedule: "1f1b", optimizer: "sgd"}, tol: 1e-4,
		steps: 1, seed: 1, timeout: 10e9, weights: bad}
	err = runRun(context.Background(), &out, &bytes.Buffer{}, filepath.Join(dir, "d.ir"), rf)
	require.ErrorContains(t, err, "bad.safetensors: safetensors: file is 4 bytes")
}
