package autopar

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/frontend"
	"github.com/autopar/autopar/mesh"
)

// fastCases are the configurations the fast search is held to the exhaustive one on: tiny
// zoo models on 1 to 8 devices in 1 or 2 hosts, at the device memory and at budgets that
// bind. Layers and micro-batches (but in one case) are fixed so that the exhaustive search
// takes a second.
var fastCases = []struct {
	model   string
	cluster string
	hosts   int // the cluster's host count replaced
	devices int // devices per host, replaced
	layers  int
	b       int
	memory  int64 // bytes; 0: the cluster's
}{
	{"mlp-tiny", "cpu", 1, 1, 2, 2, 0},
	{"mlp-tiny", "cpu", 1, 2, 3, 2, 0},
	{"mlp-tiny", "cpu", 1, 4, 3, 2, 0},
	{"mlp-tiny", "cpu", 2, 2, 3, 2, 0},
	{"mlp-tiny", "cpu", 1, 4, 3, 2, 24 << 10},
	{"mlp-tiny", "cpu", 2, 2, 3, 4, 20 << 10},
	{"gpt-tiny", "dgx-a100", 1, 2, 3, 2, 0},
	{"mlp-tiny", "p3.16xlarge", 1, 8, 8, 4, 0},
	// micro-batches searched (b 0: --microbatches auto) under a budget that binds, where
	// memFloor skips counts and the lean points wait for recomputation not to fit
	{"mlp-tiny", "cpu", 1, 2, 2, 0, 24 << 10},
	// a 2-D layer solved without its memory rows first (bound.go, solveRelaxed): where its
	// plan fits, the solve; where it does not (one layer here), a bound
	{"mlp-tiny", "dgx-a100", 1, 4, 3, 2, 12 << 10},
	// convolutions (Wide-ResNet, batch_norm per micro-batch): conv stages on 1-D and the
	// 2-D meshes of 1x4 and 2x2 (restrict.go); 900,000 bytes binds on one device (870,884
	// is the least that fits). A budget that binds on a 2-D mesh, where a conv layer gets
	// one lean point (compose.go, convLeanFractions), makes the exhaustive search run past
	// a minute (1x4 at 512 KiB and 768 KiB): not here.
	{"wresnet-tiny", "dgx-a100", 1, 2, 2, 2, 0},
	{"wresnet-tiny", "dgx-a100", 1, 4, 2, 2, 0},
	{"wresnet-tiny", "dgx-a100", 2, 2, 2, 2, 0},
	{"wresnet-tiny", "dgx-a100", 1, 1, 2, 2, 900000},
}

// fastCasesMore are slower (ten seconds each on 2 busy cores; the two with a binding budget
// minutes, as the exhaustive search's range ILPs run to their time limit — there the fast
// plan was twice as fast as the exhaustive one's, from layer ILPs that finish): go test -run
// TestFastSearchMatchesExhaustive -fastsearch.all -timeout 20m runs them too.
var fastCasesMore = []struct {
	model   string
	cluster string
	hosts   int
	devices int
	layers  int
	b       int
	memory  int64
}{
	{"gpt-tiny", "dgx-a100", 1, 4, 3, 1, 0},
	{"gpt-tiny", "dgx-a100", 2, 2, 3, 2, 0},
	{"gpt-tiny", "dgx-a100", 1, 8, 2, 1, 0},
	{"gpt-tiny", "dgx-a100", 2, 4, 2, 2, 0},
	{"gpt-tiny", "dgx-a100", 1, 4, 3, 2, 300 << 10},
	{"gpt-tiny", "dgx-a100", 1, 2, 3, 1, 600 << 10},
	// Wide-ResNet under budgets that bind on 2 devices (half a minute each search: range
	// ILPs with memory rows run long) and with 3 layers on 1x4
	{"wresnet-tiny", "dgx-a100", 1, 2, 2, 2, 512 << 10},
	{"wresnet-tiny", "dgx-a100", 2, 1, 2, 2, 512 << 10},
	{"wresnet-tiny", "dgx-a100", 1, 4, 3, 2, 0},
}

var fastSearchAll = flag.Bool("fastsearch.all", false, "TestFastSearchMatchesExhaustive: also the slower configurations")

// TestFastSearchMatchesExhaustive compiles each configuration with both searches: the fast
// plan's predicted step time is within 1% of the exhaustive one's, and equal when every
// composed price was exact.
func TestFastSearchMatchesExhaustive(t *testing.T) {
	cases := fastCases
	if *fastSearchAll {
		cases = append(cases, fastCasesMore...)
	}
	for _, tc := range cases {
		name := fmt.Sprintf("%s/%s/%dx%d/L%d/B%d/mem%d", tc.model, tc.cluster, tc.hosts, tc.devices, tc.layers, tc.b, tc.memory)
		t.Run(name, func(t *testing.T) {
			g, err := frontend.ParseFile("testdata/models/" + tc.model + ".ir")
			require.NoError(t, err)
			c, err := mesh.ParseCluster(tc.cluster)
			require.NoError(t, err)
			c.Hosts, c.DevicesPerHost = tc.hosts, tc.devices
			opts := Options{Layers: tc.layers, Microbatches: tc.b, MemoryPerDevice: tc.memory}
			if strings.HasPrefix(tc.model, "wresnet") && tc.b != 1 {
				opts.BatchNorm = BatchNormMicrobatch // batch_norm refuses more than one micro-batch otherwise
			}
			var plans [2]*Plan
			var stats [2]searchStats
			for i, s := range []string{SearchExhaustive, SearchFast} {
				opts.Search = s
				start := time.Now()
				plans[i], stats[i], err = compileSearch(context.Background(), g, c, opts)
				require.NoError(t, err, s)
				t.Logf("%s: %v, %d ILPs, step %g, %d of %d compositions inexact", s, time.Since(start), stats[i].solves,
					plans[i].Predicted.StepTime, stats[i].inexact, stats[i].composed)
			}
			ex, fast := plans[0].Predicted.StepTime, plans[1].Predicted.StepTime
			assert.LessOrEqual(t, fast, ex*1.01, "fast plan's step time within 1%% of the exhaustive one's")
			if stats[1].inexact == 0 {
				assert.InEpsilon(t, ex, fast, 1e-9, "every composed price was exact")
			}
		})
	}
}

// TestProgressFastSearch: the fast search reports its sharding ILPs (layer solves, then
// served variants) and the stage search of every micro-batch count, counts that never
// exceed their totals, and solves no more than it reports plus the exact ones.
func TestProgressFastSearch(t *testing.T) {
	g, err := frontend.ParseFile("testdata/models/mlp-tiny.ir")
	require.NoError(t, err)
	c, err := mesh.ParseCluster("cpu:2")
	require.NoError(t, err)
	ilps := map[int]bool{}
	counts := map[int]bool{}
	opts := Options{Layers: 2, Progress: func(b int, phase string, done, total int) {
		assert.LessOrEqual(t, done, total)
		switch phase {
		case "sharding ILPs":
			ilps[b] = true
		case "stage search":
			counts[b] = true
		}
	}}
	p, st, err := compileSearch(context.Background(), g, c, opts)
	require.NoError(t, err)
	assert.True(t, counts[p.Microbatches], "the winning count was searched")
	assert.Equal(t, map[int]bool{0: true}, ilps, "one progress over every micro-batch count's ILPs")
	assert.Len(t, counts, 5-st.skipped, "every count of 1, 2, 4, 8, 16 searched but those the bound skipped")
	t.Logf("%d of 5 micro-batch counts skipped", st.skipped)
	assert.Positive(t, st.solves)
}

// TestSearchOption: fast is the default, so every compiled plan the equality tests and
// FuzzPlansLower's seeds run comes from it; an unknown search is refused by name.
func TestSearchOption(t *testing.T) {
	assert.Equal(t, SearchFast, Options{}.withDefaults().Search)
	g, err := frontend.ParseFile("testdata/models/mlp-tiny.ir")
	require.NoError(t, err)
	c, err := mesh.ParseCluster("cpu:2")
	require.NoError(t, err)
	_, err = Compile(context.Background(), g, c, Options{Search: "quick"})
	assert.ErrorContains(t, err, `search "quick": expected fast or exhaustive`)
}

// TestDeferredCounts: a micro-batch count whose fast search finds no plan waits for the
// others, then gets its exhaustive search when its bound could still win: with the
// winning count's fast plan withheld, and then every count's, the compile still finds the
// exhaustive search's plan.
func TestDeferredCounts(t *testing.T) {
	g, err := frontend.ParseFile("testdata/models/mlp-tiny.ir")
	require.NoError(t, err)
	c, err := mesh.ParseCluster("cpu:2")
	require.NoError(t, err)
	opts := Options{Layers: 2, Search: SearchExhaustive}
	ref, _, err := compileSearch(context.Background(), g, c, opts)
	require.NoError(t, err)
	opts.Search = SearchFast
	defer func() { noFastPlan = nil }()
	for name, withheld := range map[string]func(int) bool{
		"winner": func(b int) bool { return b == ref.Microbatches },
		"every":  func(int) bool { return true },
	} {
		noFastPlan = withheld
		p, st, err := compileSearch(context.Background(), g, c, opts)
		require.NoError(t, err, name)
		assert.Equal(t, ref.Microbatches, p.Microbatches, name)
		assert.InEpsilon(t, ref.Predicted.StepTime, p.Predicted.StepTime, 1e-9, name)
		t.Logf("%s withheld: %d ILPs, %d counts skipped", name, st.solves, st.skipped)
	}
}

// TestOutbidCounts: settle stops a count whose optimistic bound, raised by the layers it
// solved, reaches its cutoff (another count's plan plus boundMargin): "outbid". That is
// sound only if no count is outbid by a cutoff at its own exhaustive plan plus the margin:
// with each count's cutoff set so, no count is outbid and the compile finds the
// exhaustive plan. A cutoff at half of each count's exhaustive step is then shown
// to fire, so the test can fail.
func TestOutbidCounts(t *testing.T) {
	type cfg struct {
		model, cluster string
		hosts, devices int
		layers         int
		memory         int64
	}
	cases := []cfg{
		{"mlp-tiny", "cpu", 1, 2, 2, 0},
		{"mlp-tiny", "cpu", 1, 2, 2, 24 << 10},
	}
	defer func() { countTrace, cutoffFor = nil, nil }()
	fired := 0
	for _, tc := range cases {
		g, err := frontend.ParseFile("testdata/models/" + tc.model + ".ir")
		require.NoError(t, err)
		c, err := mesh.ParseCluster(tc.cluster)
		require.NoError(t, err)
		c.Hosts, c.DevicesPerHost = tc.hosts, tc.devices
		opts := Options{Layers: tc.layers, MemoryPerDevice: tc.memory, Search: SearchExhaustive}
		ex := map[int]float64{}
		for _, b := range []int{1, 2, 4, 8, 16} {
			o := opts
			o.Microbatches = b
			if q, _, err := compileSearch(context.Background(), g, c, o); err == nil {
				ex[b] = q.Predicted.StepTime
			}
		}
		ref, _, err := compileSearch(context.Background(), g, c, opts)
		require.NoError(t, err)
		for _, scale := range []float64{1 + boundMargin, 0.5} {
			outbid := 0
			countTrace = func(_ int, _ float64, outcome string, _ float64, _ int64) {
				if outcome == "outbid" {
					outbid++
				}
			}
			cutoffFor = func(b int) float64 {
				return ex[b] * scale
			}
			o := opts
			o.Search = SearchFast
			if scale < 1 {
				// the compile may end with no plan (every count outbid): Run, not compileSearch
				_, err := Run(context.Background(), g, c, o, &PhaseConfig{UpTo: "search"})
				countTrace, cutoffFor = nil, nil
				assert.NoError(t, err)
				fired += outbid
				continue
			}
			p, _, err := compileSearch(context.Background(), g, c, o)
			countTrace, cutoffFor = nil, nil
			require.NoError(t, err)
			assert.Zero(t, outbid, "%+v: a count outbid by its own exhaustive plan", tc)
			assert.LessOrEqual(t, p.Predicted.StepTime, ref.Predicted.StepTime*1.01, "%+v", tc)
		}
	}
	assert.Positive(t, fired, "a cutoff below every plan outbids")
}
