package sharding

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/mesh"
)

// TestKernelBounds: every value's bound is at most the Compute + Comm of each of its
// strategies (so at most any solution's share), on one-, two- and four-device meshes of a
// GPU preset (roofline, kernel overhead) and of the cpu preset (host cores shared), on a
// GPT step and an MLP step; on one device the bounds add up to the solved Total. On 3 and
// 6 devices, where some dims divide no axis, the bound of a value that only replicates is
// its one-device compute.
func TestKernelBounds(t *testing.T) {
	graphs := map[string]*ir.Graph{"gpt": gptStep(t, 1, 64, 4, 8, 96, 4), "mlp": mlpStep(t, 8, 16, 2)}
	for _, cluster := range []string{"dgx-a100", "cpu"} {
		for _, shape := range [][2]int{{1, 1}, {1, 2}, {2, 2}, {1, 4}, {1, 3}, {3, 2}, {2, 3}} {
			for _, name := range []string{"gpt", "mlp"} {
				g := graphs[name]
				t.Run(fmt.Sprintf("%s/%s/%dx%d", cluster, name, shape[0], shape[1]), func(t *testing.T) {
					c, err := mesh.ParseCluster(cluster)
					require.NoError(t, err)
					c.DevicesPerHost = max(c.DevicesPerHost, 6)
					lm, err := mesh.NewLogicalMesh(c, mesh.Submesh{Hosts: 1, Devices: shape[0] * shape[1]}, shape[0], shape[1])
					require.NoError(t, err)
					opts := Options{Cluster: c}
					kb, err := KernelBounds(g, lm, opts)
					require.NoError(t, err)
					cands, err := CandidatesWith(g, lm, opts)
					require.NoError(t, err)
					sum := 0.0
					tight := 0
					for id, ss := range cands {
						sum += kb[id]
						for _, s := range ss {
							assert.LessOrEqual(t, kb[id], (s.Compute+s.Comm)*(1+1e-12), "%s: strategy %s", g.Values[id].Name, s.Name)
						}
						// A value no axis divides has only the replicated strategy: the
						// bound is its compute (maxShards 1), not the mesh's share of it.
						if len(ss) == 1 && replicatedOnly(ss[0]) && ss[0].Comm == 0 && g.FLOPs(ir.ValueID(id)) > 0 {
							assert.InEpsilon(t, ss[0].Compute, kb[id], 1e-9, "%s: replicated only", g.Values[id].Name)
							tight++
						}
					}
					if shape == [2]int{1, 3} {
						assert.Positive(t, tight, "on 1x3 some ops split over no axis")
					}
					if lm.Size() > 1 {
						return
					}
					res, err := Solve(context.Background(), g, lm, opts)
					require.NoError(t, err)
					assert.InEpsilon(t, res.Cost.Total, sum, 1e-9, "one device: the bound is the price")
				})
			}
		}
	}
}

// replicatedOnly reports whether strategy s splits nothing: no axis on its result or operands.
func replicatedOnly(s Strategy) bool {
	u := specAxes(s.Out)
	for _, in := range s.In {
		u |= specAxes(in)
	}
	return u == 0
}

// TestBounderIsKernelBounds: one Bounder, reused over meshes of every shape in turn (and
// again), gives each mesh exactly the bounds KernelBounds computes afresh.
func TestBounderIsKernelBounds(t *testing.T) {
	c, err := mesh.ParseCluster("dgx-a100")
	require.NoError(t, err)
	c.DevicesPerHost = 6
	for _, g := range []*ir.Graph{gptStep(t, 1, 64, 4, 8, 96, 4), mlpStep(t, 8, 16, 2)} {
		opts := Options{Cluster: c}
		b, err := NewBounder(g, opts)
		require.NoError(t, err)
		for range 2 {
			for _, shape := range [][2]int{{1, 1}, {1, 2}, {2, 2}, {1, 4}, {1, 3}, {3, 2}, {2, 3}} {
				lm, err := mesh.NewLogicalMesh(c, mesh.Submesh{Hosts: 1, Devices: shape[0] * shape[1]}, shape[0], shape[1])
				require.NoError(t, err)
				want, err := KernelBounds(g, lm, opts)
				require.NoError(t, err)
				assert.Equal(t, want, b.Bounds(lm), "%dx%d", shape[0], shape[1])
			}
		}
	}
}
