package autopar

import (
	"context"
	"fmt"
	"math"
	"math/rand"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/codegen"
	"github.com/autopar/autopar/frontend/zoo"
	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/mesh"
	"github.com/autopar/autopar/passes"
	"github.com/autopar/autopar/passes/sharding"
	"github.com/autopar/autopar/plan"
	"github.com/autopar/autopar/runtime"
	"github.com/autopar/autopar/runtime/interp"
	"github.com/autopar/autopar/runtime/kernels"
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
						if err := codegen.CheckStrategy(step, vid, s.In, plan.LocalOut(step, vid, s.In, s.Out), lm); err != nil {
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

// TestCandidatesRunEqual: a plan that gives every value of the step a random candidate of
// the sharding pass (codegen reshards between them where they disagree) lowers and runs
// equal to the serial interpreter: the candidates are not only accepted by
// codegen.CheckStrategy but computed right, including the reduce-scatters onto dims no
// operand carries (conv's spatial dims, scatter_add's rows) that plan.LocalOut makes partial.
func TestCandidatesRunEqual(t *testing.T) {
	gpt := zoo.NewGPT()
	gpt.DType, gpt.Layers, gpt.Hidden, gpt.Heads, gpt.Seq, gpt.Vocab, gpt.Batch = "f64", 1, 16, 2, 8, 16, 4
	wres := zoo.NewWResNet()
	wres.DType = "f64"
	for _, tc := range []struct {
		name  string
		model zoo.Model
		seeds int
	}{{"gpt", gpt, 3}, {"wresnet", wres, 2}} {
		fwd, err := tc.model.Build()
		require.NoError(t, err)
		step, err := passes.TrainingStep(fwd, passes.Optimizer{Kind: "sgd", LR: 0.1})
		require.NoError(t, err)
		lm, err := mesh.NewUniformMesh(2, 2, 1e-6, 1e-9)
		require.NoError(t, err)
		cands, err := sharding.CandidatesWith(step, lm, sharding.Options{DeviceFLOPS: 1})
		require.NoError(t, err)
		// The last run prefers, where a value has one, a candidate that splits a gather's
		// table rows (masked lookup) or reduce-scatters onto a dim no operand carries.
		special := func(id ir.ValueID, s sharding.Strategy) bool {
			if step.Value(id).Op == ir.OpGather {
				return s.In[0].Dims[0] != mesh.AxesNone
			}
			lo := plan.LocalOut(step, id, s.In, s.Out)
			return lo.Partial != 0 && !lo.Equal(mesh.Spec{Dims: s.Out.Dims, Partial: lo.Partial})
		}
		for seed := range tc.seeds + 1 {
			t.Run(fmt.Sprintf("%s-seed%d", tc.name, seed), func(t *testing.T) {
				rng := rand.New(rand.NewSource(int64(seed)))
				st := codegen.Stage{Mesh: lm, Out: map[ir.ValueID]mesh.Spec{}, In: map[ir.ValueID][]mesh.Spec{}}
				picked := 0
				for id, ss := range cands {
					vid := ir.ValueID(id)
					s := ss[rng.Intn(len(ss))]
					if seed == tc.seeds {
						for _, c := range ss {
							if special(vid, c) {
								s = c
								picked++
								break
							}
						}
					}
					st.Out[vid] = plan.LocalOut(step, vid, s.In, s.Out)
					if len(s.In) > 0 {
						st.In[vid] = s.In
					}
				}
				if seed == tc.seeds {
					require.Positive(t, picked, "no special candidate to prefer")
				}
				cp := &codegen.Plan{Step: step, Microbatches: 1, Stages: []codegen.Stage{st}, StageOf: make([]codegen.StageID, len(step.Values))}
				progs, err := codegen.Lower(cp)
				require.NoError(t, err)
				feeds := interp.InitParams(step, 1)
				for k, v := range interp.RandomInputs(step, 2) {
					feeds[k] = v
				}
				want, err := interp.RunKeep(context.Background(), step, feeds)
				require.NoError(t, err)
				par := runtime.Data{}
				for k, v := range feeds {
					par[k] = v
				}
				got, err := runtime.Run(context.Background(), progs, par, runtime.Options{})
				require.NoError(t, err)
				loss := step.Value(step.Outputs[0].Value).Name
				require.InDelta(t, 0, maxDiff(got.Stores[loss], want.Outputs[0]), 1e-9, "loss")
				for _, u := range step.Updates {
					name := step.Value(u.Target).Name
					require.InDelta(t, 0, maxDiff(got.Stores[name], want.Updates[name]), 1e-9, "update of %s", name)
				}
			})
		}
	}
}

// maxDiff is max|a−b| relative to max(max|a|, max|b|, 1e-6); +Inf when the shapes differ.
func maxDiff(a, b *kernels.Tensor) float64 {
	if a == nil || b == nil || a.Len() != b.Len() {
		return math.Inf(1)
	}
	var diff, scale float64
	for i := range a.Len() {
		x, y := a.At(i), b.At(i)
		diff = max(diff, math.Abs(x-y))
		scale = max(scale, math.Abs(x), math.Abs(y))
	}
	return diff / max(scale, 1e-6)
}
