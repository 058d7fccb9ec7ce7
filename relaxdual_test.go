package autopar

import (
	"fmt"
	"math"
	"testing"

	"github.com/autopar/autopar/mesh"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRelaxDualIsLower: on the whole cluster, the price solveRelaxedJob gives a layer
// from the certificate's dual bound (dualPrice, taken here whether or not the certificate
// closes) is at most the relaxed solve's price in w·t + u, the layer's own and its first
// stage's weighing; where the certificate closes the bound is the optimum, so the two
// agree (a bound raised 1 % fails), and solveRelaxedJob answers as solveRelaxed does.
// Where the ILP prices some values per consumer (PerEdgeValues) the bound bounds the
// objective, not the cost: counted, not asserted (the caveat of bound.go's solveRelaxed).
func TestRelaxDualIsLower(t *testing.T) {
	for _, tc := range []boundCase{
		{"mlp-tiny", "cpu", 2, 2, 4, 3},
		{"gpt-tiny", "cpu", 1, 4, 4, 3},
		{"moe-tiny", "cpu", 1, 4, 2, 2},
	} {
		t.Run(tc.name(), func(t *testing.T) {
			o, dc := tc.oracle(t)
			o.memory = 1 << 40
			o.mb, o.firstLayers = tc.b, nil // a first stage's layers weighed B (weighedLayer)
			checked, tight, doubled, weighed := 0, 0, 0, 0
			for _, mk := range o.meshes(dc) {
				if mk.sub.NumDevices() != o.c.Devices() {
					continue
				}
				for k := range o.lay.L {
					for _, sg := range []*stageGraph{o.infos[k].sg, o.weighedLayer(k)} {
						at := fmt.Sprintf("layer %d (weight %d) on %v %v", k, sg.mb, mk.sub, mk.logical)
						w := float64(max(sg.mb, 1))
						if w > 1 {
							weighed++
						}
						rel := o.solveRelaxed(sg, mk.sub, mk.logical)
						require.True(t, rel.ok, at)
						job := o.solveRelaxedJob(sg, mk.sub, mk.logical)
						require.True(t, job.ok, at)
						if !job.dual {
							assert.InEpsilon(t, w*rel.cost.Time+rel.cost.Step, w*job.cost.Time+job.cost.Step, 1e-9, "%s: the certificate's answer", at)
						}
						lm, err := mesh.NewLogicalMesh(o.c, mk.sub, mk.logical[0], mk.logical[1])
						require.NoError(t, err)
						d, err := o.freeBound(sg, mk.sub, lm, mk.logical)
						require.NoError(t, err)
						sol := &stageSolution{ok: true, dual: true, bound: (d.Bound - dualSlack*math.Abs(d.Bound)) * relaxDualScale}
						key := solveKey{sg.hash, mk.sub, mk.logical}
						o.dualPrice(sg, key, sol)
						require.True(t, sol.ok, at)
						got, want := w*sol.cost.Time+sol.cost.Step, w*rel.cost.Time+rel.cost.Step
						if rel.res.ILP.PerEdgeValues > 0 {
							doubled++
							continue
						}
						assert.LessOrEqual(t, got, want*(1+1e-9), at)
						checked++

						if d.Closed && math.Abs(d.Bound-rel.res.ILP.Objective) <= 1e-9*math.Abs(rel.res.ILP.Objective) {
							tight++
						}
					}
				}
			}
			t.Logf("%d dual prices checked (%d weighed B), %d equal to the relaxed solve's, %d where the ILP counts resharding twice", checked+doubled, weighed, tight, doubled)
			assert.Positive(t, checked)
			assert.Positive(t, tight)
		})
	}
}

// relaxDualScale is 1: a test mutation (1.01) makes TestRelaxDualIsLower fail.
var relaxDualScale = 1.0
