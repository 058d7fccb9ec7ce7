package autopar

import (
	"context"
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/dp"
	"github.com/autopar/autopar/mesh"
)

// TestRecvEstimateIsLower: the search's price of a stage's receives where it sits (the
// DP's Stage.Recv, from oracle.Receives on the ring) is a lower bound of what the plan's
// transfers cost there (priceTransfers, RecvTime), and the plan sits where the DP priced
// it, so the DP's step of the plan is at most its predicted step (the currency the count
// bound compares in, attempt.loses); the unplaced price (recvEstimate) is lower still.
// Plans pinned so that stages fill their hosts (every receive crosses hosts), share a
// host (receives stay inside it) or both, on small zoo models with p3.16xlarge's links.
// A stage that fills its hosts is priced at least half its RecvTime (its receives land in
// even shares).
func TestRecvEstimateIsLower(t *testing.T) {
	type pin struct {
		hosts, perHost int
		bounds         []int
		subs           []mesh.Submesh
	}
	sub := func(h, d int) mesh.Submesh { return mesh.Submesh{Hosts: h, Devices: d} }
	pins := []pin{
		{2, 2, []int{0, 1, 2}, []mesh.Submesh{sub(1, 2), sub(1, 2)}},               // whole hosts
		{1, 4, []int{0, 1, 2}, []mesh.Submesh{sub(1, 2), sub(1, 2)}},               // one host
		{2, 4, []int{0, 1, 2, 3}, []mesh.Submesh{sub(1, 2), sub(1, 2), sub(1, 4)}}, // both
		{2, 4, []int{0, 1, 2, 3}, []mesh.Submesh{sub(1, 4), sub(1, 2), sub(1, 2)}}, // both, the other way
		{2, 4, []int{0, 1, 2, 3}, []mesh.Submesh{sub(1, 2), sub(1, 4), sub(1, 2)}}, // first and last on one host
		{4, 2, []int{0, 1, 2, 3}, []mesh.Submesh{sub(1, 2), sub(2, 2), sub(1, 2)}}, // a stage of two hosts
		{2, 2, []int{0, 2, 3}, []mesh.Submesh{sub(1, 2), sub(1, 2)}},               // uneven stages
	}
	crossed := 0
	for _, name := range []string{"gpt-tiny", "mlp-tiny", "moe-tiny"} {
		g := model(t, name)
		for _, p := range pins {
			t.Run(fmt.Sprintf("%s/%dx%d/%v%v", name, p.hosts, p.perHost, p.bounds, p.subs), func(t *testing.T) {
				c := cluster(t, fmt.Sprintf("p3.16xlarge:%d", p.hosts))
				c.DevicesPerHost = p.perHost
				L := p.bounds[len(p.bounds)-1]
				opts := Options{Microbatches: 2, Layers: L, Constraints: dp.Constraints{Boundaries: p.bounds, StageSubmeshes: p.subs}}
				s, err := Run(context.Background(), g, c, opts, &PhaseConfig{UpTo: "search"})
				require.NoError(t, err)
				res, pl := s.Search, s.Plan
				require.Len(t, pl.Stages, len(res.Stages))
				o := newOracle(context.Background(), s.Step, s.Layering, c, 0, c.DeviceMemoryBytes, nil)
				require.True(t, res.Placed)
				for i, st := range res.Stages {
					assert.Equal(t, st.Devices, pl.Stages[i].Devices, "stage %d sits where the DP priced it", i)
					assert.InDelta(t, st.Cost.Time-pl.Stages[i].Time, st.Recv, 1e-12+1e-9*st.Recv, "stage %d: its time holds its receives", i)
					got := pl.Stages[i].RecvTime
					assert.LessOrEqual(t, st.Recv, got*(1+1e-9)+1e-15, "stage %d on %v at %v: priced %g, planned %g", i, st.Submesh, st.Devices, st.Recv, got)
					assert.LessOrEqual(t, o.recvEstimate(st.Start, st.End, st.Submesh, st.Logical), st.Recv*(1+1e-9)+1e-15, "stage %d: unplaced", i)
					if st.Submesh.Devices == p.perHost && got > 0 {
						crossed++
						assert.GreaterOrEqual(t, st.Recv, got/2, "stage %d fills its hosts: its receives cross hosts", i)
					}
				}
				assert.LessOrEqual(t, res.Time, pl.Predicted.StepTime*(1+1e-9), "the DP's step of the plan, %g, is under its prediction %g", res.Time, pl.Predicted.StepTime)
				// The count bound of the same count, unpinned, bounds the plan's prediction too.
				free, err := Run(context.Background(), g, c, Options{Microbatches: 2, Layers: L}, &PhaseConfig{UpTo: "cluster"})
				require.NoError(t, err)
				free.Microbatches = s.Microbatches
				free.Layering = s.Layering // the layering the search chose (chooseLayering)
				a, err := setUp(free)
				require.NoError(t, err)
				require.True(t, a.o.fast)
				bound := a.optimistic(context.Background())
				assert.LessOrEqual(t, bound, pl.Predicted.StepTime*(1+1e-9), "the count bound %g, the plan's prediction %g", bound, pl.Predicted.StepTime)
			})
		}
	}
	assert.Positive(t, crossed, "some stage filling its hosts receives")
}

// TestPlacedStepIsPredicted: on two hosts, unpinned, the fast search's plan sits where
// the DP priced its receives, and the DP's step of it bounds its predicted step from
// below; equal where each stage's receives are even shares (Recv = RecvTime) and the
// first stage receives nothing per step, as on gpt-tiny here.
func TestPlacedStepIsPredicted(t *testing.T) {
	equal := 0
	for _, tc := range []struct {
		name    string
		perHost int
		b       int
	}{{"gpt-tiny", 4, 4}, {"gpt-tiny", 2, 8}, {"mlp-tiny", 4, 4}, {"moe-tiny", 4, 2}} {
		t.Run(fmt.Sprintf("%s/2x%d/B%d", tc.name, tc.perHost, tc.b), func(t *testing.T) {
			c := cluster(t, "p3.16xlarge:2")
			c.DevicesPerHost = tc.perHost
			s, err := Run(context.Background(), model(t, tc.name), c, Options{Microbatches: tc.b, Layers: 4}, &PhaseConfig{UpTo: "search"})
			require.NoError(t, err)
			res, pl := s.Search, s.Plan
			require.True(t, res.Placed)
			require.Len(t, pl.Stages, len(res.Stages))
			even := pl.Stages[0].StepRecvTime == 0
			for i, st := range res.Stages {
				assert.Equal(t, st.Devices, pl.Stages[i].Devices, "stage %d sits where the DP priced it", i)
				assert.LessOrEqual(t, st.Recv, pl.Stages[i].RecvTime*(1+1e-9)+1e-15, "stage %d", i)
				t.Logf("stage %d %v: recv %.4g planned %.4g step %.4g own %.4g/%.4g", i, st.Devices, st.Recv, pl.Stages[i].RecvTime, pl.Stages[i].StepRecvTime, st.Cost.Time-st.Recv, pl.Stages[i].Time)
				even = even && math.Abs(st.Recv-pl.Stages[i].RecvTime) <= 1e-9*st.Recv
			}
			t.Logf("%s: DP %.6g s, predicted %.6g s, stages %s", tc.name, res.Time, pl.Predicted.StepTime, devicesOf(pl))
			assert.LessOrEqual(t, res.Time, pl.Predicted.StepTime*(1+1e-9))
			if even {
				equal++
				assert.InEpsilon(t, pl.Predicted.StepTime, res.Time, 1e-9)
			}
		})
	}
	assert.Positive(t, equal, "some plan's receives are even shares")
}
