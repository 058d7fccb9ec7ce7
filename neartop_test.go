package autopar

import (
	"context"
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/dp"
	"github.com/autopar/autopar/frontend"
	"github.com/autopar/autopar/mesh"
)

// TestExactlyEndsNearTop: exactly's rounds, started from an incumbent far from the bound
// (exactlyCases: the whole network on its slowest logical mesh), end at once with that
// incumbent, solving nothing, where the fastest plan known (top) is within topTolerance
// of the count's optimistic bound (nearTop); where top is just past it, or there is none,
// they run as before, to a plan faster than the incumbent (solving ILPs in
// some cases).
func TestExactlyEndsNearTop(t *testing.T) {
	ctx := context.Background()
	goneOn := int64(0) // ILPs solved by the rounds that went on
	for _, tc := range exactlyCases {
		name := fmt.Sprintf("%s/%s/%dx%d/L%d/B%d", tc.model, tc.cluster, tc.hosts, tc.devices, tc.layers, tc.b)
		// start is an oracle settled at count tc.b with exactly's state from the far
		// incumbent, and the count's optimistic plan as exactRounds' first round makes it.
		start := func() (*oracle, dp.Cluster, dp.Options, *exactState, *dp.Result) {
			g, err := frontend.ParseFile("testdata/models/" + tc.model + ".ir")
			require.NoError(t, err)
			c, err := mesh.ParseCluster(tc.cluster)
			require.NoError(t, err)
			c.Hosts, c.DevicesPerHost = tc.hosts, tc.devices
			o, dc := testOracle(t, g, c, tc.b, tc.layers)
			require.NotNil(t, o.layerInfos())
			o.mb = tc.b
			o.fast, o.lazy = true, true
			do := dp.Options{Microbatches: tc.b}
			L := o.lay.L
			o.settle(ctx, L, dc, do, nil)
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
			opt, err := o.optimisticPlan(ctx, L, dc, do)
			require.NoError(t, err, name)
			require.Greater(t, st.best.Time, opt.Time*(1+o.tolerance(st.best)), "%s: the incumbent is not within the tolerance", name)
			return o, dc, do, st, opt
		}
		// rounds runs exactRounds with top set (after start) and reports its plan, whether
		// it is the far incumbent, and the ILPs it solved.
		rounds := func(top func(opt *dp.Result) float64) (*dp.Result, bool, int64) {
			o, dc, do, st, opt := start()
			far := st.best
			o.top = top(opt)
			before := o.solves.Load()
			res, err := o.exactRounds(ctx, o.lay.L, dc, do, st, nil)
			require.NoError(t, err, name)
			return res, res == far, o.solves.Load() - before
		}
		at := func(opt *dp.Result) float64 { return opt.Time * (1 + topTolerance) }
		past := func(opt *dp.Result) float64 { return opt.Time * (1 + topTolerance) * (1 + 1e-6) }
		none := func(*dp.Result) float64 { return math.Inf(1) }

		_, far, solved := rounds(at)
		assert.True(t, far, "%s: top within the tolerance ends the rounds with the incumbent", name)
		assert.Zero(t, solved, "%s: and solves nothing", name)

		for _, c := range []struct {
			what string
			top  func(*dp.Result) float64
		}{{"top just past the tolerance", past}, {"no top", none}} {
			res, far, solved := rounds(c.top)
			assert.False(t, far, "%s: %s: the rounds go on to a faster plan", name, c.what)
			goneOn += solved
			t.Logf("%s: %s: plan %s%g, %d ILPs", name, c.what, stagesOf(res), res.Time, solved)
		}
	}
	assert.Positive(t, goneOn, "the rounds that go on solve ILPs")
}

// TestNearTop: only the fast search, only with a plan known, and up to topTolerance
// over the bound, the edge included.
func TestNearTop(t *testing.T) {
	opt := &dp.Result{Time: 10}
	o := &oracle{fast: true}
	for _, c := range []struct {
		top  float64
		fast bool
		want bool
	}{
		{math.Inf(1), true, false},
		{0, true, false},
		{9, true, true},
		{10, true, true},
		{10 * (1 + topTolerance), true, true},
		{10 * (1 + topTolerance) * (1 + 1e-9), true, false},
		{10, false, false},
	} {
		o.top, o.fast = c.top, c.fast
		assert.Equal(t, c.want, o.nearTop(opt), "top %g fast %v", c.top, c.fast)
	}
	assert.False(t, (&oracle{fast: true, top: 10}).nearTop(nil))
}
