package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar"
	"github.com/autopar/autopar/frontend"
	"github.com/autopar/autopar/mesh"
)

// explainPlan compiles mlp-tiny for cpu:4 with 2 micro-batches and writes its plan.json.
func explainPlan(t *testing.T) (string, *autopar.Plan) {
	t.Helper()
	g, err := frontend.ParseFile("../../testdata/models/mlp-tiny.ir")
	require.NoError(t, err)
	c, err := mesh.ParseCluster("cpu:4")
	require.NoError(t, err)
	p, err := autopar.Compile(context.Background(), g, c, autopar.Options{Microbatches: 2})
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "plan.json")
	var buf bytes.Buffer
	require.NoError(t, p.WriteJSON(&buf))
	require.NoError(t, os.WriteFile(path, buf.Bytes(), 0o644))
	return path, p
}

func explain(args ...string) (string, error) {
	cmd := newExplainCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	err := cmd.ExecuteContext(context.Background())
	return out.String(), err
}

func TestExplainCommand(t *testing.T) {
	path, p := explainPlan(t)
	cases := []struct {
		name string
		args []string
		want []string
	}{
		{"op", []string{path, "--op", "l1.fc.matmul"}, []string{"l1.fc.matmul = matmul", "strategy", "reshard in", "\n*  ", "why (", "\nspecs: one letter group per tensor dim: R replicated"}},
		{"op-jax", []string{path, "--op", "l1.fc.matmul", "--notation", "jax"}, []string{"P(", "\nspecs: P(...) names"}},
		{"stage", []string{path, "--stage", "1"}, []string{"stage 1 of", "logical mesh", "\n*  ", "fits"}},
		{"memory", []string{path, "--memory"}, []string{"device  stage  weights", "\n3  "}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, err := explain(tc.args...)
			require.NoError(t, err)
			for _, w := range tc.want {
				assert.Contains(t, out, w)
			}
		})
	}

	out, err := explain(path, "--memory", "--json")
	require.NoError(t, err)
	var rows []autopar.DeviceMemory
	require.NoError(t, json.Unmarshal([]byte(out), &rows))
	assert.Equal(t, p.MemoryBreakdown(), rows)

	out, err = explain(path, "--op", "l1.fc.matmul", "--json")
	require.NoError(t, err)
	var e autopar.OpExplanation
	require.NoError(t, json.Unmarshal([]byte(out), &e))
	assert.Equal(t, "l1.fc.matmul", e.Name)
	assert.True(t, e.Candidates[e.Chosen].Chosen)
}

func TestExplainCommandErrors(t *testing.T) {
	path, _ := explainPlan(t)
	corrupt := filepath.Join(t.TempDir(), "plan.json")
	require.NoError(t, os.WriteFile(corrupt, []byte(`{"version": 1, "stages": [`), 0o644))
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"no question", []string{path}, "exactly one of --op NAME, --stage N or --memory"},
		{"two questions", []string{path, "--memory", "--stage", "0"}, "exactly one of"},
		{"unknown op", []string{path, "--op", "l1.fc.matmull"}, "closest: l1.fc.matmul"},
		{"unknown stage", []string{path, "--stage", "9"}, "no stage 9; the plan has"},
		{"corrupt", []string{corrupt, "--memory"}, "corrupt plan.json"},
		{"missing", []string{filepath.Join(t.TempDir(), "nope.json"), "--memory"}, "no such file"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := explain(tc.args...)
			require.ErrorContains(t, err, tc.want)
		})
	}
}
