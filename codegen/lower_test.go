package codegen_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/codegen"
	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/mesh"
	"github.com/autopar/autopar/passes"
)

// checkGolden compares got with testdata/name, rewriting it under UPDATE_GOLDEN=1.
func checkGolden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if os.Getenv("UPDATE_GOLDEN") == "1" {
		require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run UPDATE_GOLDEN=1 go test ./codegen to create it")
	require.Equal(t, string(want), got)
}

// microStep is the micro-batch training step of a small f64 MLP.
func microStep(t testing.TB, layers, b int, opt passes.Optimizer) *ir.Graph {
	fwd := mlp(layers)(t)
	batch, err := passes.BatchSize(fwd)
	require.NoError(t, err)
	mb, err := passes.Rebatch(fwd, batch/b)
	require.NoError(t, err)
	step, err := passes.TrainingStep(mb, opt)
	require.NoError(t, err)
	return step
}

func programsText(progs []*codegen.Program) string {
	var b strings.Builder
	for _, p := range progs {
		b.WriteString(p.String())
		b.WriteString("\n")
	}
	return b.String()
}

func TestLowerGolden(t *testing.T) {
	cases := []struct {
		name string
		plan func(t testing.TB, step *ir.Graph) *codegen.Plan
		b    int
	}{
		{"lower_dp_1x2.golden", singleStage(1, 2, 2, dataParallel(mesh.Axis1), propagate), 2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			step := microStep(t, 1, c.b, passes.Optimizer{Kind: "sgd", LR: 0.1})
			progs, err := codegen.Lower(c.plan(t, step))
			require.NoError(t, err)
			again, err := codegen.Lower(c.plan(t, step))
			require.NoError(t, err)
			require.Equal(t, programsText(progs), programsText(again), "lowering is not deterministic")
			checkGolden(t, c.name, programsText(progs))
		})
	}
}
