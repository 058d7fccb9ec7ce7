package autopar

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/dp"
	"github.com/autopar/autopar/frontend"
	"github.com/autopar/autopar/mesh"
)

// exactlyCases are small models on one host (no memory limit) whose exactly, started from
// the whole network as one stage, takes more than one round.
var exactlyCases = []struct {
	model, cluster string
	hosts, devices int
	layers, b      int
	memory         int64
}{
	{"mlp-tiny", "cpu", 1, 4, 3, 2, 0},
	{"mlp-tiny", "cpu", 1, 2, 2, 4, 0},
	{"gpt-tiny", "dgx-a100", 1, 2, 3, 2, 0},
	{"gpt-tiny", "dgx-a100", 1, 4, 3, 4, 0},
}

// TestExactlyResumes: a count's exactly stopped at its cutoff (exactRounds sets outbid and
// returns, as when the count yields to another in searchAll) and resumed from its kept
// state ends with the plan of an exactly never stopped. Each starts from a plan far from
// the bound (the whole network as one stage on its slowest logical mesh); the cutoff is set below every bound, so
// that each round stops at once, then lifted; at least one case must stop before its end,
// so the test can fail.
func TestExactlyResumes(t *testing.T) {
	ctx := context.Background()
	stopped := 0
	for _, tc := range exactlyCases {
		name := fmt.Sprintf("%s/%s/%dx%d/L%d/B%d/mem%d", tc.model, tc.cluster, tc.hosts, tc.devices, tc.layers, tc.b, tc.memory)
		run := func(stops int) (*dp.Result, int) {
			g, err := frontend.ParseFile("testdata/models/" + tc.model + ".ir")
			require.NoError(t, err)
			c, err := mesh.ParseCluster(tc.cluster)
			require.NoError(t, err)
			c.Hosts, c.DevicesPerHost = tc.hosts, tc.devices
			if tc.memory > 0 {
				c.DeviceMemoryBytes = tc.memory
			}
			o, dc := testOracle(t, g, c, tc.b, tc.layers)
			require.NotNil(t, o.layerInfos())
			o.mb = tc.b
			o.fast, o.lazy = true, true
			do := dp.Options{Microbatches: tc.b}
			L := o.lay.L
			o.settle(ctx, L, dc, do, nil)
			// The first incumbent far from the bound: the whole network as one stage, on
			// the logical mesh that prices it slowest.
			var first *dp.Result
			worst := 0.0
			for a := 1; a <= tc.devices; a++ {
				if tc.devices%a != 0 {
					continue
				}
				one := &dp.Result{Stages: []dp.Stage{{Start: 0, End: L, Submesh: mesh.Submesh{Hosts: 1, Devices: tc.devices}, Logical: mesh.LogicalShape{a, tc.devices / a}}}}
				if res, err := o.recost(ctx, L, dc, do, one, nil); err == nil && res.Time > worst {
					first, worst = one, res.Time
				}
			}
			require.NotNil(t, first, name)
			st := o.startExactly(ctx, L, dc, do, first, nil)
			require.NotNil(t, st.best, name)
			n := 0
			for range stops {
				o.cutoff = 1e-9
				res, _ := o.exactRounds(ctx, L, dc, do, st, nil)
				o.cutoff = 0
				if !o.outbid {
					return res, n // ended within the tolerance: nothing left to stop
				}
				o.outbid = false
				n++
			}
			res, err := o.exactRounds(ctx, L, dc, do, st, nil)
			require.NoError(t, err, name)
			return res, n
		}
		plain, _ := run(0)
		resumed, n := run(3)
		require.NotNil(t, plain, name)
		require.NotNil(t, resumed, name)
		t.Logf("%s: %d stops; plan %s%g", name, n, stagesOf(plain), plain.Time)
		assert.Equal(t, stagesOf(plain), stagesOf(resumed), name)
		assert.InEpsilon(t, plain.Time, resumed.Time, 1e-12, name)
		stopped += n
	}
	assert.Positive(t, stopped, "some exactly stopped at its cutoff before its end")
}

// TestSeedPlan: where the devices split evenly over the layers, the count of most
// micro-batches is given Megatron's one-layer-a-stage pipeline as its first plan before the
// search (seedPlan); the compile's plan is no slower than that seed, and within 1% of the
// exhaustive search's.
func TestSeedPlan(t *testing.T) {
	cases := []struct {
		model, cluster string
		hosts, devices int
		layers         int
		memory         int64
	}{
		{"mlp-tiny", "cpu", 1, 2, 2, 0},
		{"mlp-tiny", "cpu", 1, 4, 2, 24 << 10},
		{"gpt-tiny", "dgx-a100", 1, 2, 2, 0},
	}
	defer func() { countTrace = nil }()
	for _, tc := range cases {
		name := fmt.Sprintf("%s/%s/%dx%d/L%d/mem%d", tc.model, tc.cluster, tc.hosts, tc.devices, tc.layers, tc.memory)
		g, err := frontend.ParseFile("testdata/models/" + tc.model + ".ir")
		require.NoError(t, err)
		c, err := mesh.ParseCluster(tc.cluster)
		require.NoError(t, err)
		c.Hosts, c.DevicesPerHost = tc.hosts, tc.devices
		opts := Options{Layers: tc.layers, MemoryPerDevice: tc.memory, Search: SearchExhaustive}
		ref, _, err := compileSearch(context.Background(), g, c, opts)
		require.NoError(t, err, name)
		var seeds []string
		seedStep := 0.0
		countTrace = func(_ int, _ float64, outcome string, step float64, _ int64) {
			if strings.HasPrefix(outcome, "seeded") {
				seeds = append(seeds, outcome)
				seedStep = step
			}
		}
		opts.Search = SearchFast
		p, _, err := compileSearch(context.Background(), g, c, opts)
		countTrace = nil
		require.NoError(t, err, name)
		require.Len(t, seeds, 1, "%s: one count seeded", name)
		per := tc.hosts * tc.devices / tc.layers
		want := ""
		for k := range tc.layers {
			want += fmt.Sprintf("[%d,%d)%dx%d", k, k+1, 1, per)
		}
		assert.Equal(t, want, strings.Join(strings.Fields(strings.Join(stageNames(seeds[0]), " ")), ""), name)
		t.Logf("%s: seed %g, plan %g (%d µb), exhaustive %g", name, seedStep, p.Predicted.StepTime, p.Microbatches, ref.Predicted.StepTime)
		assert.LessOrEqual(t, p.Predicted.StepTime, seedStep, name)
		assert.LessOrEqual(t, p.Predicted.StepTime, ref.Predicted.StepTime*1.01, name)
	}
}

// stageNames are the "[a,b)XxY" words of a countTrace outcome.
func stageNames(outcome string) []string {
	var out []string
	for _, w := range strings.Fields(outcome) {
		if strings.HasPrefix(w, "[") {
			if i := strings.IndexAny(w, "/"); i >= 0 {
				w = w[:i]
			}
			out = append(out, w)
		}
	}
	return out
}
