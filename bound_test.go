package autopar

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/dp"
	"github.com/autopar/autopar/frontend"
	"github.com/autopar/autopar/mesh"
)

// TestLayerBoundIsLower: the lazy search's price of a layer without an ILP (layerBound)
// is at most the layer's solved cost, part by part (per micro-batch, once per step,
// weights; a recomputing way is slower still), on every layer of zoo models and every
// logical mesh of their clusters, two-dimensional ones included; on one device it is the
// solved price.
func TestLayerBoundIsLower(t *testing.T) {
	for _, tc := range []boundCase{
		{"mlp-tiny", "cpu", 1, 4, 2, 3},
		{"mlp-tiny", "cpu", 2, 2, 4, 3},
		{"gpt-tiny", "dgx-a100", 1, 2, 2, 3},
		{"moe-tiny", "cpu", 1, 2, 2, 2},
	} {
		t.Run(tc.name(), func(t *testing.T) {
			o, dc := tc.oracle(t)
			checked := 0
			for _, mk := range o.meshes(dc) {
				for k := range o.lay.L {
					b, ok := o.layerBound(k, mk.sub, mk.logical)
					require.True(t, ok)
					sol := o.solveStage(o.infos[k].sg, mk.sub, mk.logical)
					require.True(t, sol.ok, "layer %d on %v", k, mk)
					at := fmt.Sprintf("layer %d on %v %v", k, mk.sub, mk.logical)
					assert.LessOrEqual(t, b.Time, sol.cost.Time*(1+1e-9), at)
					assert.LessOrEqual(t, b.Step, sol.cost.Step*(1+1e-9), at)
					assert.LessOrEqual(t, b.WeightBytes, sol.cost.WeightBytes, at)
					for _, r := range sol.remats {
						assert.LessOrEqual(t, b.Time, r.Time*(1+1e-9), at)
					}
					if mk.sub.NumDevices() == 1 {
						assert.InEpsilon(t, sol.cost.Time+sol.cost.Step, b.Time+b.Step, 1e-9, "%s: one device", at)
					}
					checked++
				}
			}
			t.Logf("%d layer solves checked", checked)
		})
	}
}

// TestLazySearchSkips: with the micro-batch count searched, the lazy fast search leaves
// layers unsolved and micro-batch counts unstarted, and its plan is as fast as the
// exhaustive search's over every count (within refineTolerance, the fast search's stop
// rule): what it skipped could not have won.
func TestLazySearchSkips(t *testing.T) {
	for _, tc := range []struct {
		model, cluster string
		devices        int
		layers         int
	}{
		{"mlp-tiny", "cpu", 2, 2},
		{"mlp-tiny", "cpu", 4, 2},
		{"gpt-tiny", "dgx-a100", 2, 2}, // slower: behind -short
	} {
		if testing.Short() && tc.model == "gpt-tiny" {
			continue
		}
		t.Run(fmt.Sprintf("%s/%s/%d", tc.model, tc.cluster, tc.devices), func(t *testing.T) {
			g, err := frontend.ParseFile("testdata/models/" + tc.model + ".ir")
			require.NoError(t, err)
			c, err := mesh.ParseCluster(tc.cluster)
			require.NoError(t, err)
			c.DevicesPerHost = tc.devices
			var steps [2]float64
			var stats [2]searchStats
			for i, s := range []string{SearchExhaustive, SearchFast} {
				p, st, err := compileSearch(context.Background(), g, c, Options{Layers: tc.layers, Search: s})
				require.NoError(t, err, s)
				steps[i], stats[i] = p.Predicted.StepTime, st
				t.Logf("%s: %d ILPs, B=%d, step %g, %d counts skipped, %d layer solves skipped", s, st.solves, p.Microbatches,
					p.Predicted.StepTime, st.skipped, st.bounded)
			}
			assert.LessOrEqual(t, steps[1], steps[0]*(1+refineTolerance))
			assert.Positive(t, stats[1].skipped+stats[1].bounded, "something skipped")
			assert.Less(t, stats[1].solves, stats[0].solves)
		})
	}
}

// TestLazySearchCancels: cancelled while its first layers are solved, the lazy search stops
// with the context's error and no plan.
func TestLazySearchCancels(t *testing.T) {
	g, err := frontend.ParseFile("testdata/models/gpt-tiny.ir")
	require.NoError(t, err)
	c, err := mesh.ParseCluster("dgx-a100:1")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	calls := 0
	opts := Options{Progress: func(_ int, phase string, done, total int) {
		if phase == "sharding ILPs" {
			calls++
			cancel()
		}
	}}
	p, err := Compile(ctx, g, c, opts)
	assert.ErrorIs(t, err, context.Canceled)
	assert.Nil(t, p)
	assert.Positive(t, calls)
}

// TestMemFloorIsLower: the memory the lazy search gives a range it prices by bounds
// (memFloor over the layers' weights spread perfectly) is at most what its range ILP's
// solution needs with one micro-batch in flight, run plainly or recomputing either way,
// on every layer range of zoo models and every logical mesh of their clusters; without
// recomputation, at most the plain way's. It is what lets the search drop a micro-batch
// count whose plans cannot fit without an ILP (searchAll), so it must follow remat.go's
// memory model.
func TestMemFloorIsLower(t *testing.T) {
	total := 0
	for _, tc := range []boundCase{
		{"mlp-tiny", "cpu", 1, 4, 1, 3},
		{"gpt-tiny", "dgx-a100", 1, 2, 1, 3},
		{"moe-tiny", "cpu", 1, 2, 1, 2},
	} {
		t.Run(tc.name(), func(t *testing.T) {
			o, dc := tc.oracle(t)
			checked, positive := 0, 0
			for _, mk := range o.meshes(dc) {
				n := mk.sub.NumDevices()
				for start := range o.lay.L {
					weights := 0.0
					for end := start + 1; end <= o.lay.L; end++ {
						b, ok := o.layerBound(end-1, mk.sub, mk.logical)
						require.True(t, ok)
						weights += b.WeightBytes
						sol := o.solve(start, end, mk.sub, mk.logical)
						require.True(t, sol.ok)
						at := fmt.Sprintf("layers %d-%d on %v %v", start, end-1, mk.sub, mk.logical)
						o.remat = RematNone
						none := o.memFloor(start, end, n)
						o.remat = RematAuto
						auto := o.memFloor(start, end, n)
						assert.LessOrEqual(t, auto, none, at)
						assert.LessOrEqual(t, weights+none, sol.cost.Memory(1)*(1+1e-9), "%s: plain", at)
						for i, r := range sol.remats {
							assert.LessOrEqual(t, weights+auto, r.Memory(1)*(1+1e-9), "%s: recomputing way %d", at, i)
						}
						checked++
						if auto > 0 {
							positive++
						}
					}
				}
			}
			t.Logf("%d range solves checked, %d with a positive floor under recomputation", checked, positive)
			total += positive
		})
	}
	assert.Positive(t, total, "the floor says something under recomputation")
}

// boundCase is a zoo model on a cluster of hosts × devices, its step at b micro-batches cut
// into layers, as the bound tests check it.
type boundCase struct {
	model, cluster    string
	hosts, devices, b int
	layers            int
}

func (tc boundCase) name() string {
	return fmt.Sprintf("%s/%s/%dx%d", tc.model, tc.cluster, tc.hosts, tc.devices)
}

// oracle is the case's oracle with its layers' infos built, and its DP cluster.
func (tc boundCase) oracle(t *testing.T) (*oracle, dp.Cluster) {
	t.Helper()
	g, err := frontend.ParseFile("testdata/models/" + tc.model + ".ir")
	require.NoError(t, err)
	c, err := mesh.ParseCluster(tc.cluster)
	require.NoError(t, err)
	c.Hosts, c.DevicesPerHost = tc.hosts, tc.devices
	o, dc := testOracle(t, g, c, tc.b, tc.layers)
	require.NotNil(t, o.layerInfos())
	return o, dc
}

// TestUnsolvedOncePerStructure: layers of one structure (a transformer's middle layers)
// share a solve key, and unsolved lists each key once: a plan over all of GPT-39B's eight
// layers, of four structures, asks for at most four solves, none twice (duplicates ran
// the same 64-device ILP on both cores at once, each to its own time limit).
func TestUnsolvedOncePerStructure(t *testing.T) {
	o, dc := boundCase{"gpt-39b", "p3.16xlarge", 8, 8, 4, 8}.oracle(t)
	o.allMeshes = o.meshes(dc)
	sub := mesh.Submesh{Hosts: 8, Devices: 8}
	p := &dp.Result{Stages: []dp.Stage{{Start: 0, End: o.lay.L, Submesh: sub, Logical: mesh.LogicalShape{8, 8}}}}
	keys := map[string]bool{}
	for k := range o.lay.L {
		keys[o.infos[k].sg.hash] = true
	}
	require.Less(t, len(keys), o.lay.L, "some layers share a structure")
	jobs := o.unsolved(p, false)
	require.NotEmpty(t, jobs)
	seen := map[solveKey]bool{}
	for _, j := range jobs {
		assert.False(t, seen[j.key], "layer %s listed twice", j.sg.g.Name)
		seen[j.key] = true
	}
	assert.LessOrEqual(t, len(jobs), len(keys))
}
