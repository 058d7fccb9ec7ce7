package codegen_test

import (
	"fmt"
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/codegen"
	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/mesh"
	"github.com/autopar/autopar/passes"
	"github.com/autopar/autopar/program"
)

// renamed returns a copy of g whose values are named v000000x, v000001x, ... by ValueID:
// names that say nothing of what a value is, so a package that learned a value's role from
// its name ("grad.w", "d.h", "w.m.next") gives another result on it.
func renamed(g *ir.Graph) *ir.Graph {
	c := g.Clone()
	for i := range c.Values {
		c.Values[i].Name = fmt.Sprintf("v%06dx", i)
	}
	return c.Clone() // rebuilds the name index
}

var renamedName = regexp.MustCompile(`v([0-9]{6})x`)

// nameBack rewrites the names renamed gave back to g's in text.
func nameBack(g *ir.Graph, text string) string {
	return renamedName.ReplaceAllStringFunc(text, func(s string) string {
		id, _ := strconv.Atoi(s[1:7])
		return g.Values[id].Name
	})
}

// TestNoRoleFromNames lowers the same plans on a step graph and on the same graph with
// every value renamed: the programs must be the same up to the names, and the layer
// clustering the same. Codegen finds the gradients, and clustering places backward and
// optimizer ops, by the provenance autodiff and the optimizer record (ir.Prov).
func TestNoRoleFromNames(t *testing.T) {
	cases := []struct {
		name string
		plan func(t testing.TB, step *ir.Graph) *codegen.Plan
		b    int
		opt  passes.Optimizer
	}{
		{"dp", singleStage(1, 2, 2, dataParallel(mesh.Axis1), propagate), 2, passes.Optimizer{Kind: "sgd", LR: 0.1, Momentum: 0.9}},
		{"pp-1f1b", pipeline([][2]int{{1, 1}, {1, 2}}, 4, program.OneFOneB, dataParallel(0), propagate), 4, passes.Optimizer{Kind: "adam", LR: 0.01}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			step := microStep(t, 2, c.b, c.opt)
			anon := renamed(step)
			require.NoError(t, ir.Verify(anon))

			plan := c.plan(t, step)
			progs, err := codegen.Lower(plan)
			require.NoError(t, err)
			plan.Step = anon
			anonProgs, err := codegen.Lower(plan)
			require.NoError(t, err)
			require.Equal(t, programsText(progs), nameBack(step, programsText(anonProgs)))

			for _, L := range []int{0, 2, 3} {
				lay, err := passes.ClusterLayers(step, passes.ClusterOptions{Layers: L})
				require.NoError(t, err)
				anonLay, err := passes.ClusterLayers(anon, passes.ClusterOptions{Layers: L})
				require.NoError(t, err)
				require.Equal(t, lay.Of, anonLay.Of, "layers=%d", L)
			}
		})
	}
}
