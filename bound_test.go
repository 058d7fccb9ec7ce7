package autopar

import (
	"context"
	"fmt"
	"slices"
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
			checked, redone := 0, 0
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
					redo := o.redoBound(k, mk.sub, mk.logical)
					for _, r := range sol.remats {
						assert.LessOrEqual(t, b.Time+redo, r.Time*(1+1e-9), "%s: recomputing", at)
					}
					if redo > 0 {
						redone++
					}
					if mk.sub.NumDevices() == 1 {
						assert.InEpsilon(t, sol.cost.Time+sol.cost.Step, b.Time+b.Step, 1e-9, "%s: one device", at)
					}
					checked++
				}
			}
			t.Logf("%d layer solves checked, %d with a recomputation to bound", checked, redone)
			assert.Positive(t, redone, "the recomputing bound says something")
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

// TestBoundedRangeIsLower: the price the lazy search gives a range it prices by bounds
// (boundedRange over its layers' layerBound, memFloors) is below its range ILP's
// solution, way by way, under each recomputation mode: plainly, its time and its memory
// with one to four micro-batches in flight; recomputing, below every recomputing way's.
// On every layer range of zoo models and every logical mesh of their clusters. It is what
// lets the search drop a micro-batch count whose plans cannot fit without an ILP, or
// whose stages can fit only recomputing, slower (searchAll), so it must follow remat.go's
// model.
func TestBoundedRangeIsLower(t *testing.T) {
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
				for start := range o.lay.L {
					var sum dp.StageCost
					for end := start + 1; end <= o.lay.L; end++ {
						b, ok := o.layerBound(end-1, mk.sub, mk.logical)
						require.True(t, ok)
						sum.Time += b.Time
						sum.Step += b.Step
						sum.WeightBytes += b.WeightBytes
						sol := o.solve(start, end, mk.sub, mk.logical)
						require.True(t, sol.ok)
						at := fmt.Sprintf("layers %d-%d on %v %v", start, end-1, mk.sub, mk.logical)
						for _, mode := range []string{RematNone, RematAuto, RematFull} {
							o.remat = mode
							ways := waysOf(o.boundedRange(sum, start, end, mk.sub, mk.logical))
							o.remat = RematAuto
							for _, w := range ways {
								require.True(t, w.ActBytes >= 0 && w.OnceBytes >= 0, "%s, %s: a way's memory parts are not below 0: %+v", at, mode, w)
								if !w.Recompute {
									require.NotEqual(t, RematFull, mode, "%s: full recomputation offers a plain way", at)
									assertBelow(t, w, sol.cost, end == start+1, fmt.Sprintf("%s, %s: plain", at, mode))
									continue
								}
								require.NotEqual(t, RematNone, mode, "%s: no recomputation offers a recomputing way", at)
								for i, r := range sol.remats {
									way := fmt.Sprintf("%s, %s: recomputing way %d", at, mode, i)
									assertBelow(t, w, r, end == start+1, way)
									assert.LessOrEqual(t, w.Time-sum.Time, (r.Time-sol.cost.Time)*(1+1e-9), "%s: recomputed time", way)
								}
								if w.OnceBytes > 0 {
									positive++
								}
							}
						}
						checked++
					}
				}
			}
			t.Logf("%d range solves checked, %d with a positive floor recomputing", checked, positive)
			total += positive
		})
	}
	assert.Positive(t, total, "the floor says something under recomputation")
}

// waysOf lists c and the ways it offers.
func waysOf(c dp.StageCost) []dp.StageCost {
	return append([]dp.StageCost{c}, c.Remat...)
}

// assertBelow checks bound b against a solved way c: memory with one to four
// micro-batches in flight and, when time is set, time per micro-batch. (Not the weights
// and the step part alone: summed over a range's layers they count twice what two layers
// share, which their memory makes up for here; nor, in a range of several layers, its
// time: the layers' bounds, summed, miss what a kernel fused across a layer boundary
// saves, up to 1.5% on these models. Those are oracle.lower's caveats for any range,
// boundMargin's reason; TestLayerBoundIsLower checks a layer's time, and the recomputed
// time is checked on every range.)
func assertBelow(t *testing.T, b, c dp.StageCost, time bool, at string) {
	t.Helper()
	if time {
		assert.LessOrEqual(t, b.Time, c.Time*(1+1e-9), "%s: time", at)
	}
	for i := 1; i <= 4; i++ {
		assert.LessOrEqual(t, b.Memory(i), c.Memory(i)*(1+1e-9), "%s: memory, %d in flight", at, i)
	}
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

// TestRelaxedIsLower: a layer solved without its memory rows (solveRelaxed) is priced at
// most at the layer's solve under the memory, in the ILP's objective (w·t + u, w the
// layer's weight) and every way to run it (recomputing, with redoBound), where the memory
// binds; where its plan fits, it is marked exact and prices exactly as the solve under
// the memory (the optimum of the relaxation is feasible, so optimal). Each layer on each
// two-dimensional mesh, under a budget far above its relaxed peak and one just under it.
func TestRelaxedIsLower(t *testing.T) {
	for _, tc := range []boundCase{
		{"mlp-tiny", "cpu", 2, 2, 4, 3},
		{"mlp-tiny", "cpu", 1, 4, 2, 3},
		{"moe-tiny", "cpu", 1, 4, 2, 2},
	} {
		t.Run(tc.name(), func(t *testing.T) {
			o, dc := tc.oracle(t)
			bound, exact, doubled := 0, 0, 0
			for _, mk := range o.meshes(dc) {
				if meshFactor(mk.logical) <= 4 {
					continue
				}
				for k := range o.lay.L {
					if tc.model == "moe-tiny" && k == 0 {
						continue // its solve under a binding budget takes two minutes
					}
					at := fmt.Sprintf("layer %d on %v %v", k, mk.sub, mk.logical)
					sg, w := o.infos[k].sg, o.weight(k)
					o.memory = 1 << 40
					rel := o.solveRelaxed(sg, mk.sub, mk.logical)
					require.True(t, rel.ok, at)
					require.True(t, rel.exact, "%s: fits 1 TiB", at)
					sol := o.solveStage(sg, mk.sub, mk.logical)
					require.True(t, sol.ok, at)
					assert.InEpsilon(t, w*sol.cost.Time+sol.cost.Step, w*rel.cost.Time+rel.cost.Step, 1e-9, "%s: exact", at)
					assert.Equal(t, sol.cost.WeightBytes, rel.cost.WeightBytes, at)
					assert.Equal(t, sol.cost.ActBytes, rel.cost.ActBytes, at)
					exact++

					o.memory = rel.res.PeakMemory * 97 / 100 // binds
					tight := o.solveRelaxed(sg, mk.sub, mk.logical)
					if rel.res.ILP.PerEdgeValues > 0 {
						doubled++ // an approximation there (bound.go): measured, not proven
					}
					require.True(t, tight.ok, at)
					assert.False(t, tight.exact, "%s: over the budget", at)
					sol = o.solveStage(sg, mk.sub, mk.logical)
					if !sol.ok || sol.res == nil {
						continue // nothing fits: no price to bound
					}
					assert.LessOrEqual(t, w*tight.cost.Time+tight.cost.Step, (w*sol.cost.Time+sol.cost.Step)*(1+1e-9), at)
					redo := o.redoBound(k, mk.sub, mk.logical)
					for _, r := range sol.remats {
						assert.LessOrEqual(t, w*(tight.cost.Time+redo)+tight.cost.Step, (w*r.Time+r.Step)*(1+1e-9), "%s: recomputing", at)
					}
					bound++
				}
			}
			t.Logf("%d relaxed solves exact, %d bounds under a binding budget, %d of them where the ILP counts resharding twice", exact, bound, doubled)
			assert.Positive(t, bound)
		})
	}
}

// TestMayFitIsExact: a range that mayFit says cannot fit (so compose solves no lean
// points for it) has no way to run, solved by its own range ILP, that fits one
// micro-batch; under a budget at the median of the ranges' bounded needs, so that some
// ranges may fit and others cannot.
func TestMayFitIsExact(t *testing.T) {
	o, dc := boundCase{"mlp-tiny", "cpu", 1, 4, 2, 3}.oracle(t)
	need := func(start, end int, mk meshKey) float64 {
		var c dp.StageCost
		for k := start; k < end; k++ {
			b, ok := o.layerBound(k, mk.sub, mk.logical)
			require.True(t, ok)
			c.WeightBytes += b.WeightBytes
		}
		c = o.boundedRange(c, start, end, mk.sub, mk.logical)
		m := c.Memory(1)
		for _, r := range c.Remat {
			m = min(m, r.Memory(1))
		}
		return m
	}
	// The budget: between the bounded need and the solved one of as many ranges as can be,
	// where a mayFit that says no too early would be caught.
	var cuts []float64
	o.memory = 1 << 40
	for _, mk := range o.meshes(dc) {
		for start := range o.lay.L {
			for end := start + 1; end <= o.lay.L; end++ {
				sol := o.solve(start, end, mk.sub, mk.logical)
				require.True(t, sol.ok)
				c := sol.costFor(o.remat)
				m := c.Memory(1)
				for _, r := range c.Remat {
					m = min(m, r.Memory(1))
				}
				cuts = append(cuts, need(start, end, mk), m)
			}
		}
	}
	slices.Sort(cuts)
	o.memory = int64(cuts[len(cuts)/2])
	clear(o.solved) // solved again under the budget
	fits := map[bool]int{}
	for _, mk := range o.meshes(dc) {
		for start := range o.lay.L {
			for end := start + 1; end <= o.lay.L; end++ {
				may := o.mayFit(start, end, mk.sub, mk.logical)
				fits[may]++
				if may {
					continue
				}
				sol := o.solve(start, end, mk.sub, mk.logical)
				if !sol.ok {
					continue // no plan at all
				}
				c := sol.costFor(o.remat)
				assert.False(t, fitsSomeWay(c, float64(o.memory)), "[%d,%d) on %v %v: mayFit says no, the ILP fits", start, end, mk.sub, mk.logical)
			}
		}
	}
	t.Logf("ranges that may fit: %d, that cannot: %d", fits[true], fits[false])
	assert.Positive(t, fits[true])
	assert.Positive(t, fits[false])
}

// TestFirstStageLowerIsLower: the optimistic price of a range from layer 0 (oracle.lower),
// whose ILP weighs B·t + u while its later layers are solved weighing t + u, is below the
// range's own ILP in B·t + u and in t, on one and two hosts, with every layer solved: first
// with the later layers priced from their own solves (reweighed, as the lazy search does
// until it solves them at B), then solved at B (weighedPrice). docs/DECISIONS.md, "A first
// stage's optimistic price". Before, lower summed the weight-1 solves: up to 16.5% above
// (mlp-tiny, layers 0-1 on 2×2 as 4×1, B = 16). The margin is the composition's own
// caveat, measured on one device, where no weight can trade t for u (up to 2.7% on these
// ranges: kernels fused across a layer boundary).
func TestFirstStageLowerIsLower(t *testing.T) {
	const margin = 0.03
	for _, tc := range []boundCase{
		{"mlp-tiny", "cpu", 2, 2, 16, 3},
		{"mlp-tiny", "cpu", 1, 4, 16, 3},
		{"gpt-tiny", "cpu", 2, 1, 8, 3},
	} {
		t.Run(tc.name(), func(t *testing.T) {
			g, err := frontend.ParseFile("testdata/models/" + tc.model + ".ir")
			require.NoError(t, err)
			c, err := mesh.ParseCluster(tc.cluster)
			require.NoError(t, err)
			c.Hosts, c.DevicesPerHost = tc.hosts, tc.devices
			o, dc := testOracle(t, g, c, tc.b, tc.layers)
			o.mb = tc.b // as compileWith sets it per count, before the stages are cut
			require.NotNil(t, o.layerInfos())
			w := o.weight(0)
			require.Equal(t, float64(tc.b), w)
			meshes := o.meshes(dc)
			for _, mk := range meshes {
				for k := range o.lay.L {
					o.layerPoints(k, mk.sub, mk.logical, false) // each layer's own solve
				}
			}
			for _, lazy := range []bool{true, false} {
				checked, reweighed, worst := 0, 0, 0.0
				for _, mk := range meshes {
					for end := 2; end <= o.lay.L; end++ {
						o.lazy = lazy // lazy: no solve at B yet, lower reweighs; else it solves them
						lo, ok := o.lower(0, end, mk.sub, mk.logical)
						o.lazy = false
						require.True(t, ok)
						sol := o.solve(0, end, mk.sub, mk.logical)
						require.True(t, sol.ok)
						at := fmt.Sprintf("lazy %v, layers 0-%d on %v %v", lazy, end-1, mk.sub, mk.logical)
						exact := w*sol.cost.Time + sol.cost.Step
						assert.LessOrEqual(t, w*lo.Time+lo.Step, exact*(1+margin), "%s: B·t + u", at)
						assert.LessOrEqual(t, lo.Time, sol.cost.Time*(1+margin), "%s: t", at)
						worst = max(worst, (w*lo.Time+lo.Step)/exact)
						if o.reweighs(0, end-1) {
							reweighed++
						}
						checked++
					}
				}
				t.Logf("lazy %v: %d ranges from layer 0 checked, %d with a reweighed layer, bound/ILP up to %.3f", lazy, checked, reweighed, worst)
				assert.Positive(t, reweighed)
			}
		})
	}
}

// TestLowerMemoryIsLower: the optimistic price of a range (oracle.lower) holds, run
// plainly, no more memory than the range's own solve under a budget that binds, whenever
// that solve runs plainly: its layers' fastest points may hold their weights replicated
// (the fastest way on a small mesh), which the range, short of memory, lays out sharded.
// Under soundMemory (on by default since branch sound, see there): with the points'
// memory, the optimistic plan ran such a range recomputing or not at all: GPT-2.6B/8's
// one-stage [0,8) on 4×2 held 17.9 GB optimistically against the 16 GiB device, where its
// range ILP has a plan at 16.0 GiB (docs/DECISIONS.md, branch gpt26). It fails 3 times
// with soundMemory off. The range's peak floors (memRefute) are set first, so lower's
// price holds them too (branch sound: doubling peakRaised's floor fails it 4 times).
func TestLowerMemoryIsLower(t *testing.T) {
	defer func(old bool) { soundMemory = old }(soundMemory)
	soundMemory = true
	checked := 0
	// Each case: a model, a budget as a fraction of each range's free plan, the ranges'
	// last end (the budgets and ranges where the points' memory was above the solve's,
	// kept few: each range solve under a binding budget is an ILP with memory rows).
	for _, c := range []struct {
		tc     boundCase
		frac   float64
		maxEnd int
	}{
		{boundCase{"gpt-tiny", "cpu", 2, 1, 4, 3}, 0.75, 3},
		{boundCase{"mlp-tiny", "cpu", 1, 4, 4, 3}, 0.6, 2},
	} {
		tc, frac := c.tc, c.frac
		t.Run(fmt.Sprintf("%s/%.2f", tc.name(), frac), func(t *testing.T) {
			o, dc := tc.oracle(t)
			o.mb = tc.b
			meshes := o.meshes(dc)
			free := map[rangeKey]float64{}
			for _, mk := range meshes {
				for end := 2; end <= c.maxEnd; end++ {
					sol := o.solve(0, end, mk.sub, mk.logical)
					require.True(t, sol.ok)
					free[rangeKey{0, end, mk.sub, mk.logical}] = sol.cost.Memory(1)
				}
			}
			for _, mk := range meshes {
				for end := 2; end <= c.maxEnd; end++ {
					k := rangeKey{0, end, mk.sub, mk.logical}
					// A fresh oracle under a budget below the range's free plan.
					o, _ := tc.oracle(t)
					o.mb = tc.b
					o.memory = int64(frac * free[k])
					for j := range end {
						o.layerPoints(j, mk.sub, mk.logical, false)
					}
					require.True(t, o.peakFloors(0, end, mk.sub, mk.logical)) // as memRefute sets them (branch sound)
					lo, ok := o.lower(0, end, mk.sub, mk.logical)
					require.True(t, ok)
					sol := o.solve(0, end, mk.sub, mk.logical)
					if !sol.ok || sol.res == nil || sol.res.PeakMemory > o.memory {
						continue // no plain plan fits: nothing to bound
					}
					at := fmt.Sprintf("layers 0-%d on %v %v at %d bytes", end-1, mk.sub, mk.logical, o.memory)
					assert.LessOrEqual(t, lo.Memory(1), sol.cost.Memory(1)*(1+1e-9), "%s: plain memory, optimistic %+v, solved %+v", at, lo, sol.cost)
					checked++
				}
			}
		})
	}
	t.Logf("%d range solves under a binding budget checked", checked)
	assert.Positive(t, checked)
}
