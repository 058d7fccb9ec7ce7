package main

import (
	"bytes"
	"context"
	"testing"

	"github.com/autopar/autopar/internal/golden"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSummaryGolden pins compile's summary: every stage's compute and communication, the
// step's breakdown naming the stage it is of, and times in SI units even where a GPU
// preset makes a tiny model's micro-batch take nanoseconds.
func TestSummaryGolden(t *testing.T) {
	for _, tc := range []struct{ golden, cluster, plan, microbatches string }{
		{"summary-mlp-cpu4-pp.txt", "cpu:4", "tp=2,pp=2,dp=1", "4"},
		{"summary-mlp-cpu4-dp-tp.txt", "cpu:4", "tp=2,pp=1,dp=2", "2"},
		{"summary-mlp-p3.txt", "p3.16xlarge:1", "", "4"},
	} {
		t.Run(tc.golden, func(t *testing.T) {
			var out, errOut bytes.Buffer
			f := compileFlags{cluster: tc.cluster, microbatches: tc.microbatches, schedule: "1f1b", optimizer: "sgd", plan: tc.plan}
			require.NoError(t, runCompile(context.Background(), &out, &errOut, "../../testdata/models/mlp-tiny.ir", f))
			assert.NotRegexp(t, `\de[-+]\d`, out.String(), "no exponents in the summary")
			golden.Check(t, tc.golden, out.String())
		})
	}
}

// TestTablesGolden pins the other tables a user reads: shard's ops and collectives, and
// explain's op, stage and memory tables, each with units and (where specs show) the key.
func TestTablesGolden(t *testing.T) {
	run := func(args ...string) string {
		t.Helper()
		root := newRoot()
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetErr(&out)
		root.SetArgs(args)
		require.NoError(t, root.Execute(), out.String())
		return out.String()
	}
	golden.Check(t, "shard-mlp-2x2.txt", run("shard", "../../testdata/models/mlp-tiny.ir", "--mesh", "2x2", "--cluster", "cpu:4"))
	path, _ := explainPlan(t)
	golden.Check(t, "explain-op.txt", run("explain", path, "--op", "l1.fc.matmul"))
	golden.Check(t, "explain-stage.txt", run("explain", path, "--stage", "0"))
	golden.Check(t, "explain-memory.txt", run("explain", path, "--memory"))
}
