package autopar

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/codegen"
	"github.com/autopar/autopar/frontend/zoo"
	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/mesh"
	"github.com/autopar/autopar/passes"
	"github.com/autopar/autopar/passes/sharding"
)

// TestCandidatesLower: every strategy the sharding pass offers, for every value of the
// training step of each bundled tiny model (and a GPT with dropout) on the meshes 1×2, 2×1,
// 2×2 and 1×4, is one codegen lowers. Both read the op's row of the ir op table, so there
// is no filter between them: `autopar shard` and `compile` see the same candidates.
func TestCandidatesLower(t *testing.T) {
	type model struct {
		name  string
		build func() (*ir.Graph, error)
	}
	var models []model
	for _, name := range zoo.Names() {
		m, err := zoo.NewPreset(name + "-tiny")
		require.NoError(t, err)
		models = append(models, model{name + "-tiny", m.Build})
	}
	models = append(models, model{"gpt-tiny-dropout", func() (*ir.Graph, error) {
		m := zoo.NewGPT()
		m.Dropout = 0.1
		return m.Build()
	}})
	c := cluster(t, "cpu:4")
	for _, md := range models {
		g, err := md.build()
		require.NoError(t, err)
		step, err := passes.TrainingStep(g, passes.Optimizer{Kind: "adam", LR: 0.01})
		require.NoError(t, err)
		for _, sh := range [][2]int{{1, 2}, {2, 1}, {2, 2}, {1, 4}} {
			t.Run(fmt.Sprintf("%s-%dx%d", md.name, sh[0], sh[1]), func(t *testing.T) {
				lm, err := mesh.NewLogicalMesh(c, mesh.Submesh{Hosts: 1, Devices: sh[0] * sh[1]}, sh[0], sh[1])
				require.NoError(t, err)
				cands, err := sharding.CandidatesWith(step, lm, sharding.Options{Cluster: c})
				require.NoError(t, err)
				n, bad := 0, 0
				for id, ss := range cands {
					for _, s := range ss {
						n++
						vid := ir.ValueID(id)
						if err := codegen.CheckStrategy(step, vid, s.In, localOut(step, vid, s.In, s.Out), lm); err != nil {
							bad++
							if bad <= 5 {
								t.Errorf("offered but not lowerable: %s: %v", s.Name, err)
							}
						}
					}
				}
				require.Zero(t, bad, "%d of %d candidates do not lower", bad, n)
				require.Greater(t, n, len(step.Values), "every value has at least one strategy, some more")
			})
		}
	}
}
