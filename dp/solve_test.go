package dp

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/autopar/autopar/program"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// instance is one random cross-check case.
type instance struct {
	layers int
	c      Cluster
	o      Oracle
	opts   Options
}

func (in instance) String() string {
	return fmt.Sprintf("L=%d %dx%d mem=%.4g B=%d %v maxStages=%d", in.layers, in.c.Hosts,
		in.c.DevicesPerHost, in.c.MemoryPerDevice, in.opts.Microbatches, in.opts.Schedule, in.opts.MaxStages)
}

// randomInstance draws a case; its memory is set relative to what brute force says plans
// need, so that many cases are tight (exactly the minimum) or infeasible.
func randomInstance(rng *rand.Rand, seed uint64, adversarialCosts bool) instance {
	in := instance{layers: 1 + rng.IntN(6)}
	in.c = Cluster{Hosts: 1 + rng.IntN(2), DevicesPerHost: []int{1, 2, 4}[rng.IntN(3)], MemoryPerDevice: math.MaxFloat64}
	in.o = newPlausible(seed, in.layers)
	if adversarialCosts {
		in.o = adversarial{seed}
	}
	in.opts = Options{Microbatches: []int{1, 4, 8}[rng.IntN(3)], Schedule: program.Schedule(rng.IntN(2))}
	if rng.IntN(4) == 0 {
		in.opts.MaxStages = 1 + rng.IntN(3)
	}
	need := brute(in.layers, in.c, in.o, in.opts, nil).need
	switch f := rng.Float64(); {
	case math.IsInf(need, 1):
	case f < 0.15:
		in.c.MemoryPerDevice = need // tight: exactly the least that fits
	case f < 0.3:
		in.c.MemoryPerDevice = need * 0.97 // infeasible
	default:
		in.c.MemoryPerDevice = need * (1 + 2*rng.Float64())
	}
	return in
}

// TestSolveMatchesBruteForce is the proof that the recurrence, the t_max search and its
// early stops are exact: on many random instances Solve's time equals exhaustive search's,
// and where nothing fits it reports the same least memory.
func TestSolveMatchesBruteForce(t *testing.T) {
	for _, adv := range []bool{false, true} {
		rng := rand.New(rand.NewPCG(42, uint64(len(fmt.Sprint(adv)))))
		for seed := range uint64(400) {
			in := randomInstance(rng, seed, adv)
			want := brute(in.layers, in.c, in.o, in.opts, nil)
			got, err := Solve(context.Background(), in.layers, in.c, in.o, in.opts)
			checkAgainstBrute(t, in, want, got, err)
		}
	}
}

func checkAgainstBrute(t *testing.T, in instance, want bruteResult, got *Result, err error) {
	t.Helper()
	switch {
	case math.IsInf(want.need, 1):
		require.ErrorIs(t, err, ErrNoPlan, "%v", in)
	case math.IsInf(want.time, 1):
		var me *MemoryError
		require.ErrorAs(t, err, &me, "%v", in)
		assert.InEpsilon(t, want.need, me.Need, 1e-9, "%v", in)
	default:
		require.NoError(t, err, "%v", in)
		assert.InEpsilon(t, want.time, got.Time, 1e-9, "%v: brute plan %+v, got %+v", in, want.plan, got.Stages)
		checkPlan(t, in, got)
	}
}

// checkPlan checks a plan's own consistency: contiguous stages covering the layers, the
// costs the oracle gives, memory within budget, devices tiling the cluster.
func checkPlan(t *testing.T, in instance, r *Result) {
	t.Helper()
	k, sum, slowest := 0, 0.0, 0.0
	used := make([]bool, in.c.Devices())
	for i, st := range r.Stages {
		require.Equal(t, k, st.Start)
		k = st.End
		sc, ok := in.o.StageCost(st.Start, st.End, st.Submesh, st.Logical)
		require.True(t, ok)
		sc.Time += st.Recv
		require.Equal(t, sc, st.Cost)
		if _, ok := in.o.(Receiver); !ok {
			require.Zero(t, st.Recv)
		}
		require.Equal(t, InFlight(in.opts.Schedule, len(r.Stages)-i, in.opts.Microbatches), st.InFlight)
		require.LessOrEqual(t, st.Memory, in.c.MemoryPerDevice)
		require.Equal(t, st.Submesh.NumDevices(), st.Logical.NumDevices())
		checkDevices(t, in.c, r, st, used)
		sum, slowest = sum+st.Cost.Time, max(slowest, st.Cost.Time)
	}
	require.Equal(t, in.layers, k)
	assert.InEpsilon(t, sum+float64(in.opts.Microbatches-1)*slowest+r.Stages[0].Cost.Step, r.Time, 1e-12)
	assert.InDelta(t, r.Stages[0].Cost.Step, r.Step, 1e-15)
	assert.InDelta(t, r.Time, r.Compute+r.Bubble+r.Step, 1e-12*r.Time)
	if in.opts.MaxStages > 0 {
		require.LessOrEqual(t, len(r.Stages), in.opts.MaxStages)
	}
	for d, u := range used {
		require.True(t, u, "device %d unused", d)
	}
}

// checkDevices checks that a stage's devices form its submesh: whole hosts, or one aligned
// block inside a host, not used by another stage.
func checkDevices(t *testing.T, c Cluster, r *Result, st Stage, used []bool) {
	t.Helper()
	require.Len(t, st.Devices, st.Submesh.NumDevices())
	first := st.Devices[0]
	if !r.Placed {
		require.Zero(t, first%st.Submesh.NumDevices()%c.DevicesPerHost, "stage %+v not aligned", st)
	} else if st.Submesh.Hosts > 1 || st.Submesh.Devices == c.DevicesPerHost {
		require.Zero(t, first%c.DevicesPerHost, "stage %+v not at a host's first device", st)
	}
	for j, d := range st.Devices {
		require.Equal(t, first+j, d)
		require.False(t, used[d], "device %d used twice", d)
		used[d] = true
	}
	if st.Submesh.Hosts == 1 {
		require.Equal(t, first/c.DevicesPerHost, st.Devices[len(st.Devices)-1]/c.DevicesPerHost)
	}
}

// TestStepSearchMatchesPlainLoop checks the galloping t_max search against Alpa's plain
// ascending loop on instances too big for brute force, and that it runs fewer passes.
func TestStepSearchMatchesPlainLoop(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	var fast, slow, solved int
	for seed := range uint64(60) {
		layers := 4 + rng.IntN(12)
		c := Cluster{Hosts: 1 + rng.IntN(4), DevicesPerHost: []int{2, 4, 8}[rng.IntN(3)], MemoryPerDevice: 20 + 60*rng.Float64()}
		var o Oracle = newPlausible(seed, layers)
		if seed%3 == 0 {
			o = adversarial{seed}
		}
		opts := Options{Microbatches: []int{1, 2, 4, 8, 32}[rng.IntN(5)], Schedule: program.Schedule(rng.IntN(2))}
		got, err := Solve(context.Background(), layers, c, o, opts)
		want, werr := solve(context.Background(), layers, c, o, opts, true)
		if werr != nil {
			require.EqualError(t, err, werr.Error())
			continue
		}
		require.NoError(t, err)
		assert.InEpsilon(t, want.Time, got.Time, 1e-12, "seed %d", seed)
		fast, slow, solved = fast+got.Stats.Evaluated, slow+want.Stats.Evaluated, solved+1
	}
	assert.Greater(t, solved, 40)
	assert.Less(t, fast, slow)
	t.Logf("%d plans; recurrence passes: step search %d, plain loop %d", solved, fast, slow)
}

// TestSolveMatchesBruteForceHosts is the proof that the stages where they sit are priced
// exactly: with receives priced by the link (Receiver), on up to 3 hosts of up to 4
// devices, Solve's time equals exhaustive search's over every plan and every layout of
// its stages in pipeline order, and its stages sit where the receives were priced.
func TestSolveMatchesBruteForceHosts(t *testing.T) {
	placed := 0
	for _, adv := range []bool{false, true} {
		rng := rand.New(rand.NewPCG(43, uint64(len(fmt.Sprint(adv)))))
		for seed := range uint64(300) {
			in := randomInstance(rng, seed, adv)
			in.layers = min(in.layers, 5)
			in.c.Hosts = 1 + rng.IntN(3)
			in.o = receiving{newPlausible(seed, in.layers), seed, in.layers}
			if adv {
				in.o = receiving{adversarial{seed}, seed, in.layers}
			}
			need := brute(in.layers, in.c, in.o, in.opts, nil).need
			if !math.IsInf(need, 1) && rng.IntN(3) > 0 {
				in.c.MemoryPerDevice = need * (1 + rng.Float64())
			} else if !math.IsInf(need, 1) {
				in.c.MemoryPerDevice = need
			}
			want := brute(in.layers, in.c, in.o, in.opts, nil)
			got, err := Solve(context.Background(), in.layers, in.c, in.o, in.opts)
			checkAgainstBrute(t, in, want, got, err)
			if err != nil || t.Failed() {
				if t.Failed() {
					return
				}
				continue
			}
			// The plan's own time, its stages' receives re-priced where they sit.
			stages := slices.Clone(got.Stages)
			for i := range stages {
				stages[i].Cost.Time -= stages[i].Recv
			}
			if got.Placed {
				placed++
				first := stages[0].Devices[0]
				require.True(t, ring(stages, in.c, first, in.o.(Receiver), in.layers), "%v: %+v", in, got.Stages)
				for i, st := range stages {
					assert.InDelta(t, got.Stages[i].Recv, st.Recv, 1e-12, "%v: stage %d", in, i)
					assert.Equal(t, got.Stages[i].Devices, st.Devices, "%v: stage %d", in, i)
				}
			}
		}
	}
	assert.Greater(t, placed, 100)
}
