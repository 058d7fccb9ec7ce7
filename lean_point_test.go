package autopar

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/frontend"
	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/mesh"
	"github.com/autopar/autopar/passes/sharding"
)

// A memory-lean layer point under the layer's least footprint is the min-peak ILP's plan
// (sharding.MemoryError.Plan, compose.go's layerPoints): a real plan, so the Pareto set
// of (time, memory) stays one of plans. Its memory is its result's peak recomputed from its
// strategies (PeakWith), and its time is what the layer's own ILP prices its choice at:
// the layer solved again with every value forced to the point's strategy (sharding.Options.Force,
// the stage's options otherwise, data instructions included; fusion off, see below) costs
// the same. (Its ILP objective is another ILP's: forced values keep their own groups. That
// the point's objective is its own ILP's at its choice, TestMemoryErrorCarriesItsPlan in
// passes/sharding checks.)
func TestLeanPointIsARealPlan(t *testing.T) {
	g, err := frontend.ParseFile("testdata/models/gpt-tiny.ir")
	require.NoError(t, err)
	c, err := mesh.ParseCluster("dgx-a100")
	require.NoError(t, err)
	c.DevicesPerHost = 2
	// Forcing a value keeps it out of its leader's fused kernel (sharding's fusionOf), which
	// prices it differently: without fusion a forced plan is priced as the free one.
	c.FuseElementwise = false
	o, dc := testOracle(t, g, c, 2, 3)
	o.fast = true
	require.NotNil(t, o.layerInfos())
	minPeak, slower := 0, 1.0
	for _, mk := range o.meshes(dc) {
		for k := range o.lay.L {
			pts := o.layerPoints(k, mk.sub, mk.logical, true)
			require.NotEmpty(t, pts)
			for i, p := range pts[1:] {
				if p.res == nil || !strings.HasPrefix(p.res.ILP.Status, "min-peak") {
					continue
				}
				minPeak++
				sg := o.infos[k].sg
				peak, err := p.res.PeakWith(sg.g, nil)
				require.NoError(t, err)
				assert.Equal(t, float64(peak), p.memory(), "layer %d on %v, point %d: memory is the plan's peak", k, mk, i+1)
				assert.Less(t, p.memory(), pts[0].memory(), "leaner than the fastest point")
				assert.InDelta(t, p.res.Cost.Total, p.time+p.step, 1e-12*p.res.Cost.Total)

				lm, err := mesh.NewLogicalMesh(o.c, mk.sub, mk.logical[0], mk.logical[1])
				require.NoError(t, err)
				force := map[ir.ValueID]int{}
				for v, x := range p.res.Choice {
					force[ir.ValueID(v)] = x
				}
				r, err := sg.solve(o.ctx, lm, sharding.Options{Cluster: o.c, MemoryBudget: 1 << 62, SolveLayersOnce: true,
					BlockKeys: sg.keys, Reshard: o.memo(mk.sub, mk.logical), Microbatches: sg.mb, Update: sg.once,
					Accumulated: sg.acc, Force: force})
				require.NoError(t, err)
				assert.Equal(t, p.res.Choice, r.Choice)
				assert.InDelta(t, r.Cost.Total, p.res.Cost.Total, 1e-12*r.Cost.Total, "layer %d on %v: time is the ILP's price of the choice", k, mk)
				assert.Equal(t, r.PeakMemory, p.res.PeakMemory)

				// What the point gives up: the fastest plan of the same footprint.
				f, err := sg.solve(o.ctx, lm, sharding.Options{Cluster: o.c, MemoryBudget: p.res.Budget, SolveLayersOnce: true,
					BlockKeys: sg.keys, Reshard: o.memo(mk.sub, mk.logical), Microbatches: sg.mb, Update: sg.once, Accumulated: sg.acc})
				require.NoError(t, err, "the footprint is a feasible budget")
				slower = max(slower, p.res.Cost.Total/f.Cost.Total)
			}
		}
	}
	t.Logf("%d lean points from min-peak plans, at most %.3fx the time of the fastest plan of their footprint", minPeak, slower)
	assert.Positive(t, minPeak, "some lean budget lies under a layer's least footprint")
}

// BenchmarkLeanPoints measures, on one GPT-1.3B layer (Alpa's 4-GPU row: p3.16xlarge, 4
// devices, 16, 32 and 64 micro-batches, every 4-device mesh), what a memory-lean point
// costs and what it gives: the wall time of the lean points once the fastest point is
// solved (lean-ms), and how much slower the lean point under the least footprint is than
// the fastest plan of that footprint (slower-x; that plan is solved here, without the
// lean solves' iteration limit, and not timed).
//
//	go test -run '^$' -bench LeanPoints -benchtime 1x .
func BenchmarkLeanPoints(b *testing.B) {
	g, err := frontend.ParseFile("testdata/models/gpt-1.3b.ir")
	require.NoError(b, err)
	c, err := mesh.ParseCluster("p3.16xlarge:1")
	require.NoError(b, err)
	c.DevicesPerHost = 4
	for _, mb := range []int{16, 32, 64} {
		o, dc := testOracle(b, g, c, mb, 0)
		o.fast = true
		require.NotNil(b, o.layerInfos())
		for _, mk := range o.meshes(dc) {
			if mk.sub.Devices != 4 {
				continue
			}
			b.Run(fmt.Sprintf("b%d/%dx%d", mb, mk.logical[0], mk.logical[1]), func(b *testing.B) {
				const k = 1
				require.NotEmpty(b, o.layerPoints(k, mk.sub, mk.logical, false))
				for b.Loop() {
					start := time.Now()
					pts := o.layerPoints(k, mk.sub, mk.logical, true)
					b.ReportMetric(float64(time.Since(start).Milliseconds()), "lean-ms")
					for _, p := range pts[1:] {
						if p.res == nil || !strings.HasPrefix(p.res.ILP.Status, "min-peak") {
							continue
						}
						sg := o.infos[k].sg
						lm, err := mesh.NewLogicalMesh(o.c, mk.sub, mk.logical[0], mk.logical[1])
						require.NoError(b, err)
						f, err := sg.solve(o.ctx, lm, sharding.Options{Cluster: o.c, MemoryBudget: p.res.Budget, SolveLayersOnce: true,
							BlockKeys: sg.keys, Reshard: o.memo(mk.sub, mk.logical), Microbatches: sg.mb, Update: sg.once,
							Accumulated: sg.acc, WarmStart: pts[0].res})
						require.NoError(b, err)
						b.ReportMetric(p.res.Cost.Total/f.Cost.Total, "slower-x")
						b.ReportMetric(float64(pts[0].res.PeakMemory)/float64(p.res.PeakMemory), "fastest-peak-x")
					}
				}
			})
		}
	}
}
