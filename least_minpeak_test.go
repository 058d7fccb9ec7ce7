package autopar

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/frontend"
	"github.com/autopar/autopar/mesh"
)

// TestLeastMinPeak: in the fast search, a stage that fits in no way under the device
// memory is priced by the min-peak ILP's plan (leastMinPeak) instead of a re-solve at its
// least footprint ("least"): the DP rejects every plan of that footprint alike, so the
// plans are byte-identical with and without it, and the lazy search's re-solves are gone
// (a count the fast search defers is searched exhaustively, which still re-solves). Budgets that
// bind hard on small meshes, so that some stages cannot fit on them.
func TestLeastMinPeak(t *testing.T) {
	defer func(v bool) { leastMinPeak = v }(leastMinPeak)
	defer func(f func(string, func() string)) { stageTrace = f }(stageTrace)
	var least atomic.Int64
	stageTrace = func(label string, run func() string) {
		if strings.HasSuffix(label, ",least") {
			least.Add(1)
		}
		run()
	}
	hit := 0
	type config struct {
		model, cluster string
		hosts, devices int
		layers, b      int
		memory         int64
	}
	cases := []config{{"mlp-tiny", "dgx-a100", 1, 4, 3, 2, 12 << 10}}
	if *fastSearchAll {
		cases = append(cases, config{"gpt-tiny", "dgx-a100", 1, 4, 3, 2, 300 << 10}) // 10-20 s
	}
	for _, tc := range cases {
		name := fmt.Sprintf("%s/%dx%d/mem%d", tc.model, tc.hosts, tc.devices, tc.memory)
		t.Run(name, func(t *testing.T) {
			g, err := frontend.ParseFile("testdata/models/" + tc.model + ".ir")
			require.NoError(t, err)
			c, err := mesh.ParseCluster(tc.cluster)
			require.NoError(t, err)
			c.Hosts, c.DevicesPerHost = tc.hosts, tc.devices
			opts := Options{Layers: tc.layers, Microbatches: tc.b, MemoryPerDevice: tc.memory, Search: SearchFast}
			var plans [2]string
			var leasts [2]int64
			for i, on := range []bool{false, true} {
				leastMinPeak = on
				least.Store(0)
				p, _, err := compileSearch(context.Background(), g, c, opts)
				require.NoError(t, err, "leastMinPeak %v", on)
				var buf bytes.Buffer
				require.NoError(t, p.Plan.WriteJSON(&buf))
				plans[i], leasts[i] = buf.String(), least.Load()
			}
			t.Logf("least re-solves: %d without, %d with leastMinPeak", leasts[0], leasts[1])
			assert.Equal(t, plans[0], plans[1], "the same plan, byte for byte")
			assert.LessOrEqual(t, leasts[1], leasts[0])
			if leasts[1] < leasts[0] {
				hit++
			}
		})
	}
	assert.Positive(t, hit, "no case saves a re-solve")
}
