package autopar

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/frontend"
	"github.com/autopar/autopar/mesh"
)

// TestYieldedCounts: with --microbatches auto the fast search takes the micro-batch counts
// best first (searchAll): a count whose settle raises its bound past the next count's
// yields and resumes when its bound is the lowest again (errYield). The tiny models' counts
// do not yield at yieldMargin (their bounds part at once), so the test makes every count
// yield at each turn (yieldMargin near −1) until maxYields: a count resumed from its
// kept oracle, again and again, still finds a plan within 1% of the exhaustive search's,
// the one the fast search finds without yields.
func TestYieldedCounts(t *testing.T) {
	cases := []struct {
		model, cluster string
		hosts, devices int
		layers         int
		memory         int64
	}{
		{"mlp-tiny", "cpu", 1, 2, 2, 0},
		{"mlp-tiny", "cpu", 1, 2, 2, 24 << 10},
		{"mlp-tiny", "cpu", 1, 4, 3, 0},
		{"gpt-tiny", "dgx-a100", 1, 2, 3, 0},
		{"wresnet-tiny", "dgx-a100", 1, 2, 2, 0},
	}
	margin := yieldMargin
	defer func() { countTrace, yieldMargin = nil, margin }()
	for _, tc := range cases {
		name := fmt.Sprintf("%s/%s/%dx%d/L%d/mem%d", tc.model, tc.cluster, tc.hosts, tc.devices, tc.layers, tc.memory)
		g, err := frontend.ParseFile("testdata/models/" + tc.model + ".ir")
		require.NoError(t, err)
		c, err := mesh.ParseCluster(tc.cluster)
		require.NoError(t, err)
		c.Hosts, c.DevicesPerHost = tc.hosts, tc.devices
		opts := Options{Layers: tc.layers, MemoryPerDevice: tc.memory, Search: SearchExhaustive}
		if strings.HasPrefix(tc.model, "wresnet") {
			opts.BatchNorm = BatchNormMicrobatch
		}
		start := time.Now()
		ref, _, err := compileSearch(context.Background(), g, c, opts)
		require.NoError(t, err, name)
		tex := time.Since(start)
		opts.Search = SearchFast
		plain, _, err := compileSearch(context.Background(), g, c, opts)
		require.NoError(t, err, name)
		n := 0
		yieldMargin = -1 + 1e-9
		countTrace = func(_ int, _ float64, outcome string, _ float64, _ int64) {
			if outcome == "yield" {
				n++
			}
		}
		start = time.Now()
		p, _, err := compileSearch(context.Background(), g, c, opts)
		countTrace, yieldMargin = nil, margin
		require.NoError(t, err, name)
		t.Logf("%s: exhaustive %v step %g (%d µb), fast %v step %g (%d µb), %d yields", name, tex, ref.Predicted.StepTime,
			ref.Microbatches, time.Since(start), p.Predicted.StepTime, p.Microbatches, n)
		assert.LessOrEqual(t, p.Predicted.StepTime, ref.Predicted.StepTime*1.01, name)
		assert.Equal(t, plain.Predicted.StepTime, p.Predicted.StepTime, "%s: the plan found without yields", name)
		assert.Positive(t, n, "%s: counts yielded", name)
	}
}
