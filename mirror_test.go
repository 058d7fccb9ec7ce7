package autopar

import (
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/dp"
	"github.com/autopar/autopar/mesh"
)

// TestHostMeshesMirror: inside one host both axes of a logical mesh cost the same, so a
// stage on (a, b) prices exactly as on (b, a) (oracle.mirrored skips a > b; issue 13,
// branch gpt39): every layer range of the tiny models on one host of 8 and of 4 devices,
// on every such pair, free and under a budget that binds, has the same plain and
// recomputing costs (time, step, weights, activations). Caught: collectives along
// axis 1 priced 1.5× those along axis 0 (mesh.LogicalMesh.Cost), 16 failures.
func TestHostMeshesMirror(t *testing.T) {
	same := func(t *testing.T, at string, x, y dp.StageCost) {
		t.Helper()
		for _, p := range [][3]any{{"time", x.Time, y.Time}, {"step", x.Step, y.Step},
			{"weights", x.WeightBytes, y.WeightBytes}, {"act", x.ActBytes, y.ActBytes}, {"once", x.OnceBytes, y.OnceBytes}} {
			a, b := p[1].(float64), p[2].(float64)
			assert.LessOrEqual(t, math.Abs(a-b), 1e-9*math.Max(math.Abs(a), math.Abs(b)), "%s: %s %g against %g", at, p[0], a, b)
		}
	}
	checked := 0
	for _, tc := range []boundCase{
		{"mlp-tiny", "dgx-a100", 1, 8, 4, 3},
		{"gpt-tiny", "dgx-a100", 1, 8, 4, 3},
		{"moe-tiny", "dgx-a100", 1, 8, 1, 2},
	} {
		for _, budget := range []int64{0, 1} {
			if budget == 1 && tc.model != "mlp-tiny" {
				continue // a binding budget's ILPs are dear on the others' ranges
			}
			t.Run(fmt.Sprintf("%s/budget%d", tc.name(), budget), func(t *testing.T) {
				o, dc := tc.oracle(t)
				o.canonical = false
				var pairs [][2]meshKey
				for _, s := range dp.Submeshes(dc) {
					for _, l := range dp.LogicalShapes(s) {
						if s.Hosts == 1 && l[0] > l[1] {
							pairs = append(pairs, [2]meshKey{{s, mesh.LogicalShape{l[1], l[0]}}, {s, l}})
						}
					}
				}
				require.NotEmpty(t, pairs)
				if budget == 1 {
					// a budget that binds: 70 % of the layers' largest free peak on the first pair
					peak := int64(0)
					for k := range o.lay.L {
						sg, err := o.stage(k, k+1)
						require.NoError(t, err)
						sol := o.solveStageBudget(sg, pairs[0][0].sub, pairs[0][0].logical, 1<<62, nil, nil, nil)
						require.True(t, sol.ok)
						peak = max(peak, sol.res.PeakMemory)
					}
					o.memory = peak * 7 / 10
				}
				for start := range o.lay.L {
					for end := start + 1; end <= o.lay.L && (budget == 0 || end == start+1); end++ {
						sg, err := o.stage(start, end)
						require.NoError(t, err)
						for _, p := range pairs {
							at := fmt.Sprintf("layers %d-%d on %v %v/%v", start, end-1, p[0].sub, p[0].logical, p[1].logical)
							a := o.solveStage(sg, p[0].sub, p[0].logical)
							b := o.solveStage(sg, p[1].sub, p[1].logical)
							require.Equal(t, a.ok, b.ok, at)
							require.Equal(t, a.err == nil, b.err == nil, at)
							if !a.ok {
								continue
							}
							same(t, at, a.cost, b.cost)
							require.Len(t, b.remats, len(a.remats), at)
							for i := range a.remats {
								same(t, at+fmt.Sprintf(" way %d", i+1), a.remats[i], b.remats[i])
							}
							checked++
						}
					}
				}
			})
		}
	}
	t.Logf("%d stages on mirrored meshes compared", checked)
}
