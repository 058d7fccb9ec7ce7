package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// execute runs one subcommand with args, returning what it printed.
func execute(cmd *cobra.Command, args ...string) (string, error) {
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	err := cmd.ExecuteContext(context.Background())
	return out.String(), err
}

func TestExportCommand(t *testing.T) {
	path, _ := explainPlan(t)
	dir := t.TempDir()

	out, err := execute(newExportCmd(), path, "--format", "jax", "-o", filepath.Join(dir, "plan_jax.py"))
	require.NoError(t, err)
	assert.Contains(t, out, "wrote ")
	data, err := os.ReadFile(filepath.Join(dir, "plan_jax.py"))
	require.NoError(t, err)
	assert.Contains(t, string(data), "PARAMS = {\n    'l0.fc.w': (0, P(")

	out, err = execute(newExportCmd(), path, "--format", "DTensor")
	require.NoError(t, err)
	assert.Contains(t, out, "from torch.distributed.device_mesh import DeviceMesh")
	assert.Contains(t, out, "'l0.fc.w': (0, [")

	// An MLP is no transformer: Megatron's arguments cannot say it, and nothing is written.
	megatron := filepath.Join(dir, "args.sh")
	_, err = execute(newExportCmd(), path, "--format", "megatron", "-o", megatron)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "plan.json: export: the plan is not expressible as Megatron-LM arguments")
	assert.Contains(t, err.Error(), "model mlp has no attention")
	assert.NoFileExists(t, megatron)
}

func TestExportCommandErrors(t *testing.T) {
	dir := t.TempDir()
	notPlan := filepath.Join(dir, "model.json")
	require.NoError(t, os.WriteFile(notPlan, []byte(`{"graph": "mlp"}`), 0o644))
	ir := "../../testdata/models/mlp-tiny.ir"
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{ir, "--format", "onnx"}, `--format: export: unknown format "onnx", expected one of jax, dtensor, megatron`},
		{[]string{ir}, `required flag(s) "format" not set`},
		{[]string{ir, "--format", "jax"}, "mlp-tiny.ir: plan: corrupt plan.json"},
		{[]string{notPlan, "--format", "jax"}, `model.json: plan: corrupt plan.json: json: unknown field "graph"`},
		{[]string{filepath.Join(dir, "missing.json"), "--format", "jax"}, "no such file or directory"},
	} {
		_, err := execute(newExportCmd(), c.args...)
		require.Error(t, err, "%v", c.args)
		assert.Contains(t, err.Error(), c.want, "%v", c.args)
	}
}

// TestNotationFlags checks --notation on the three commands that print specs.
func TestNotationFlags(t *testing.T) {
	path, _ := explainPlan(t)
	out, err := execute(newExplainCmd(), path, "--op", "l1.fc.matmul", "--notation", "dtensor")
	require.NoError(t, err)
	assert.Regexp(t, `RR = RR x RR +\[Replicate\(\), Replicate\(\)\]; \[Replicate\(\), Replicate\(\)\] +\[Replicate\(\), Replicate\(\)\] `, out,
		"strategy names stay Alpa's, the in and out columns are placements")

	dot := filepath.Join(t.TempDir(), "g.dot")
	_, err = execute(newRenderCmd(), path, "--ops", "--notation", "jax", "-o", dot)
	require.NoError(t, err)
	data, err := os.ReadFile(dot)
	require.NoError(t, err)
	assert.Contains(t, string(data), `\nP(None, `)

	out, err = execute(newShardCmd(), "../../testdata/models/mlp-tiny.ir", "--mesh", "2x2", "--cluster", "cpu:4", "--notation", "jax")
	require.NoError(t, err)
	assert.Contains(t, out, "P(None, ")

	for _, c := range []struct {
		cmd  *cobra.Command
		args []string
		want string
	}{
		{newExplainCmd(), []string{path, "--op", "l1.fc.matmul", "--notation", "torch"}, `--notation: notation "torch": expected one of alpa, jax, dtensor`},
		{newExplainCmd(), []string{path, "--op", "l1.fc.matmul", "--notation", "jax", "--json"}, "--json writes specs in Alpa's notation"},
		{newShardCmd(), []string{"x.ir", "--mesh", "2x2", "--cluster", "cpu:4", "--notation", "jax", "--json"}, "expected --notation alpa with --json"},
		{newRenderCmd(), []string{path, "-o", dot, "--notation", "dtensor"}, "--notation dtensor writes the specs of the op view, expected --ops with it"},
	} {
		_, err := execute(c.cmd, c.args...)
		require.Error(t, err, "%v", c.args)
		assert.Contains(t, err.Error(), c.want)
	}
}
