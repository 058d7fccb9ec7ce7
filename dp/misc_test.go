package dp

import (
	"context"
	"math"
	"testing"

	"github.com/autopar/autopar/mesh"
	"github.com/autopar/autopar/program"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSubmeshes(t *testing.T) {
	assert.Equal(t, []mesh.Submesh{{Hosts: 1, Devices: 1}}, Submeshes(Cluster{Hosts: 1, DevicesPerHost: 1}))
	assert.Equal(t, []mesh.Submesh{{Hosts: 1, Devices: 1}, {Hosts: 1, Devices: 2}, {Hosts: 1, Devices: 4}, {Hosts: 2, Devices: 4}}, Submeshes(Cluster{Hosts: 2, DevicesPerHost: 4}))
	assert.Equal(t, []mesh.Submesh{{Hosts: 1, Devices: 1}, {Hosts: 1, Devices: 2}, {Hosts: 1, Devices: 4}, {Hosts: 1, Devices: 8}, {Hosts: 2, Devices: 8}, {Hosts: 3, Devices: 8}},
		Submeshes(Cluster{Hosts: 3, DevicesPerHost: 8}))
}

func TestLogicalShapes(t *testing.T) {
	// Whole hosts: the tensor axis (mp) stays inside a host.
	assert.Equal(t, []mesh.LogicalShape{{2, 4}, {4, 2}, {8, 1}}, LogicalShapes(mesh.Submesh{Hosts: 2, Devices: 4}))
	assert.Equal(t, []mesh.LogicalShape{{1, 1}}, LogicalShapes(mesh.Submesh{Hosts: 1, Devices: 1}))
	assert.Equal(t, []mesh.LogicalShape{{3, 2}, {6, 1}}, LogicalShapes(mesh.Submesh{Hosts: 3, Devices: 2}))
	assert.Equal(t, []mesh.LogicalShape{{1, 8}, {2, 4}, {4, 2}, {8, 1}}, LogicalShapes(mesh.Submesh{Hosts: 1, Devices: 8}))
}

func TestInFlight(t *testing.T) {
	assert.Equal(t, 3, InFlight(program.OneFOneB, 3, 8))
	assert.Equal(t, 2, InFlight(program.OneFOneB, 3, 2), "no more in flight than there are micro-batches")
	assert.Equal(t, 8, InFlight(program.GPipe, 1, 8))
}

// uniform: a layer costs 1 on one device; any range runs 0.6 per layer on two.
func uniform(k, i int, s mesh.Submesh, _ mesh.LogicalShape) (StageCost, bool) {
	per := 1.0
	if s.NumDevices() == 2 {
		per = 0.6
	}
	return StageCost{Time: per * float64(i-k), WeightBytes: 10, ActBytes: 1}, true
}

// TestKnownPlans: with few micro-batches one data-parallel stage wins (4·1.2 = 4.8 < 2+3·1);
// with many the bubble is paid per stage and a two-stage pipeline wins (2+7·1 = 9 < 9.6).
func TestKnownPlans(t *testing.T) {
	c := Cluster{Hosts: 1, DevicesPerHost: 2, MemoryPerDevice: 100}
	r, err := Solve(context.Background(), 2, c, oracleFunc(uniform), Options{Microbatches: 4})
	require.NoError(t, err)
	require.Len(t, r.Stages, 1)
	assert.Equal(t, Stage{Start: 0, End: 2, Submesh: mesh.Submesh{Hosts: 1, Devices: 2}, Logical: mesh.LogicalShape{1, 2},
		Cost: StageCost{Time: 1.2, WeightBytes: 10, ActBytes: 1}, InFlight: 1, Memory: 11, Devices: []int{0, 1}}, r.Stages[0])
	assert.InDelta(t, 4.8, r.Time, 1e-12)

	r, err = Solve(context.Background(), 2, c, oracleFunc(uniform), Options{Microbatches: 8})
	require.NoError(t, err)
	require.Len(t, r.Stages, 2)
	assert.InDelta(t, 9.0, r.Time, 1e-12)
	assert.InDelta(t, 2.0, r.Compute, 1e-12)
	assert.InDelta(t, 7.0, r.Bubble, 1e-12)
	assert.Equal(t, []int{2, 1}, []int{r.Stages[0].InFlight, r.Stages[1].InFlight})
	assert.Equal(t, []int{0}, r.Stages[0].Devices)
	assert.Equal(t, []int{1}, r.Stages[1].Devices)
}

// TestMemoryError: the two-stage pipeline needs 10+2·1 = 12 bytes on its first stage under
// 1F1B and one stage needs 11, so at 10.5 bytes nothing fits and 11 is the answer; under
// GPipe with 8 micro-batches the least is 10+8 = 18.
func TestMemoryError(t *testing.T) {
	c := Cluster{Hosts: 1, DevicesPerHost: 2, MemoryPerDevice: 10.5}
	_, err := Solve(context.Background(), 2, c, oracleFunc(uniform), Options{Microbatches: 8})
	var me *MemoryError
	require.ErrorAs(t, err, &me)
	assert.Equal(t, 11.0, me.Need)
	assert.EqualError(t, err, "dp: no pipeline plan fits in memory: 2 layers on 1×2 devices with 10.5 bytes per device under 1f1b with 8 micro-batches; the smallest per-device memory that would fit is 11 bytes")

	_, err = Solve(context.Background(), 2, c, oracleFunc(uniform), Options{Microbatches: 8, Schedule: program.GPipe})
	require.ErrorAs(t, err, &me)
	assert.Equal(t, 18.0, me.Need)

	c.MemoryPerDevice = 11 // exactly enough for one stage, not for the faster pipeline
	r, err := Solve(context.Background(), 2, c, oracleFunc(uniform), Options{Microbatches: 8})
	require.NoError(t, err)
	require.Len(t, r.Stages, 1)
}

func TestNoPlan(t *testing.T) {
	none := oracleFunc(func(int, int, mesh.Submesh, mesh.LogicalShape) (StageCost, bool) { return StageCost{}, false })
	_, err := Solve(context.Background(), 3, Cluster{1, 4, 1}, none, Options{Microbatches: 1})
	require.ErrorIs(t, err, ErrNoPlan)
}

func TestValidation(t *testing.T) {
	ok := Cluster{Hosts: 1, DevicesPerHost: 2, MemoryPerDevice: 100}
	o := oracleFunc(uniform)
	nan := oracleFunc(func(int, int, mesh.Submesh, mesh.LogicalShape) (StageCost, bool) {
		return StageCost{Time: math.NaN()}, true
	})
	cases := []struct {
		layers int
		c      Cluster
		o      Oracle
		opts   Options
		want   string
	}{
		{0, ok, o, Options{Microbatches: 1}, "dp: the model has 0 layers, want at least 1"},
		{2, ok, o, Options{}, "dp: 0 micro-batches, want at least 1"},
		{2, Cluster{0, 8, 1}, o, Options{Microbatches: 1}, "dp: cluster has zero devices: 0 hosts × 8 devices per host"},
		{2, Cluster{1, 0, 1}, o, Options{Microbatches: 1}, "dp: cluster has zero devices: 1 hosts × 0 devices per host"},
		{2, Cluster{1, 6, 1}, o, Options{Microbatches: 1}, "dp: devices per host must be a power of two for submeshes to tile the cluster, got 6"},
		{2, Cluster{1, 2, 0}, o, Options{Microbatches: 1}, "dp: memory per device must be positive, got 0"},
		{2, ok, o, Options{Microbatches: 1, MaxStages: -1}, "dp: max stages -1 is negative"},
		{2, ok, o, Options{Microbatches: 1, Schedule: 7}, "dp: unknown pipeline schedule 7"},
		{2, ok, nil, Options{Microbatches: 1}, "dp: nil cost oracle"},
		{2, ok, nan, Options{Microbatches: 1}, "dp: oracle cost of layers [0, 1) on submesh 1x1, logical mesh 1x1: time NaN, step 0, weights 0, activations 0: each must be finite and non-negative"},
	}
	for _, tc := range cases {
		_, err := Solve(context.Background(), tc.layers, tc.c, tc.o, tc.opts)
		assert.EqualError(t, err, tc.want)
	}
}

func TestMaxStages(t *testing.T) {
	c := Cluster{Hosts: 1, DevicesPerHost: 2, MemoryPerDevice: 100}
	r, err := Solve(context.Background(), 2, c, oracleFunc(uniform), Options{Microbatches: 8, MaxStages: 1})
	require.NoError(t, err)
	require.Len(t, r.Stages, 1)
	assert.InDelta(t, 9.6, r.Time, 1e-12)
}

// TestEarlyStopPrunes: on a realistic instance Alpa's stop B·t_max ≥ best leaves most
// candidates unvisited, and the step search skips most of the rest.
func TestEarlyStopPrunes(t *testing.T) {
	c := Cluster{Hosts: 2, DevicesPerHost: 8, MemoryPerDevice: 1e9}
	o := newPlausible(5, 16)
	opts := Options{Microbatches: 16}
	plain, err := solve(context.Background(), 16, c, o, opts, true)
	require.NoError(t, err)
	st := plain.Stats
	assert.Greater(t, st.Pruned, st.Candidates/2, "%+v", st)
	assert.Equal(t, st.Candidates-st.Pruned+1, st.Evaluated, "the plain loop visits every candidate below the stop")

	fast, err := Solve(context.Background(), 16, c, o, opts)
	require.NoError(t, err)
	assert.Equal(t, plain.Time, fast.Time)
	assert.Greater(t, fast.Stats.Skipped, 0, "%+v", fast.Stats)
	assert.Less(t, fast.Stats.Evaluated, st.Evaluated/2, "%+v vs %+v", fast.Stats, st)
	t.Logf("plain loop %+v; step search %+v", st, fast.Stats)
}

func TestProgress(t *testing.T) {
	var calls [][2]int
	opts := Options{Microbatches: 8, Progress: func(done, total int) { calls = append(calls, [2]int{done, total}) }}
	r, err := Solve(context.Background(), 12, Cluster{2, 4, 1e9}, newPlausible(2, 12), opts)
	require.NoError(t, err)
	require.NotEmpty(t, calls)
	for i, c := range calls {
		require.Equal(t, r.Stats.Candidates, c[1])
		if i > 0 {
			require.GreaterOrEqual(t, c[0], calls[i-1][0])
		}
	}
	require.Equal(t, r.Stats.Candidates, calls[len(calls)-1][0])
}

func TestCancel(t *testing.T) {
	c := Cluster{Hosts: 2, DevicesPerHost: 4, MemoryPerDevice: 1e9}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := Solve(ctx, 8, c, newPlausible(1, 8), Options{Microbatches: 4})
	require.ErrorIs(t, err, context.Canceled)

	// Cancelled while the oracle is being asked.
	ctx, cancel = context.WithCancel(context.Background())
	calls, p := 0, newPlausible(1, 8)
	o := oracleFunc(func(k, i int, s mesh.Submesh, l mesh.LogicalShape) (StageCost, bool) {
		if calls++; calls == 10 {
			cancel()
		}
		return p.StageCost(k, i, s, l)
	})
	_, err = Solve(ctx, 8, c, o, Options{Microbatches: 4})
	require.ErrorIs(t, err, context.Canceled)

	// Cancelled during the t_max search.
	ctx, cancel = context.WithCancel(context.Background())
	_, err = Solve(ctx, 8, c, p, Options{Microbatches: 4, Progress: func(int, int) { cancel() }})
	require.ErrorIs(t, err, context.Canceled)
}

func TestDeterministic(t *testing.T) {
	c := Cluster{Hosts: 2, DevicesPerHost: 4, MemoryPerDevice: 60}
	a, err := Solve(context.Background(), 10, c, adversarial{9}, Options{Microbatches: 4})
	require.NoError(t, err)
	b, err := Solve(context.Background(), 10, c, adversarial{9}, Options{Microbatches: 4})
	require.NoError(t, err)
	require.Equal(t, a, b)
}

// Past ExhaustiveHosts the shapes do not grow with the cluster, and Solve plans on a
// cluster of ten thousand hosts with them, counting devices in hosts.
func TestSubmeshesBoundedOnHugeClusters(t *testing.T) {
	c := Cluster{Hosts: 10000, DevicesPerHost: 8, MemoryPerDevice: 1 << 40}
	subs := Submeshes(c)
	assert.LessOrEqual(t, len(subs), 2*BalancedStages)
	assert.Contains(t, subs, mesh.Submesh{Hosts: 10000, Devices: 8})
	assert.Contains(t, subs, mesh.Submesh{Hosts: 3334, Devices: 8})
	assert.Contains(t, subs, mesh.Submesh{Hosts: 3333, Devices: 8})
	for _, s := range subs {
		assert.LessOrEqual(t, len(LogicalShapes(s)), 4, "%v", s)
	}
	assert.Equal(t, []mesh.LogicalShape{{10000, 8}, {20000, 4}, {40000, 2}, {80000, 1}}, LogicalShapes(mesh.Submesh{Hosts: 10000, Devices: 8}))
	assert.Equal(t, 8, block(c.Devices(), subs))
	o := oracleFunc(func(s, e int, sub mesh.Submesh, l mesh.LogicalShape) (StageCost, bool) {
		return StageCost{Time: float64(e-s) / float64(sub.NumDevices()), WeightBytes: 1}, true
	})
	res, err := Solve(context.Background(), 3, c, o, Options{Microbatches: 4})
	require.NoError(t, err)
	n := 0
	for _, s := range res.Stages {
		n += s.Submesh.NumDevices()
	}
	assert.Equal(t, c.Devices(), n, "the stages use the whole cluster")
}

// A search past MaxSearchStates is refused before the oracle is asked anything.
func TestSolveRefusesAHugeSearch(t *testing.T) {
	c := Cluster{Hosts: 1 << 24, DevicesPerHost: 1, MemoryPerDevice: 1 << 40}
	err := Check(8, c, Options{Microbatches: 1})
	require.ErrorContains(t, err, "more than its limit of 33554432 (dp.MaxSearchStates")
	o := oracleFunc(func(int, int, mesh.Submesh, mesh.LogicalShape) (StageCost, bool) { panic("asked") })
	_, err = Solve(context.Background(), 8, c, o, Options{Microbatches: 1})
	require.ErrorContains(t, err, "dp.MaxSearchStates")
}
