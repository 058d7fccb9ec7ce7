package autopar

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/dp"
	"github.com/autopar/autopar/mesh"
)

// TestRecvEstimateIsLower: the search's price of a stage's receives (oracle.recvEstimate,
// in the DP's stage time) is a lower bound of what the plan's transfers cost
// (priceTransfers, RecvTime), so the DP's step of a plan is at most its predicted step
// (the currency the count bound compares in, attempt.loses). Plans pinned so that stages
// fill their hosts (every receive crosses hosts), share a host (receives stay inside it)
// or both, on small zoo models with p3.16xlarge's links. A stage that fills its hosts is
// priced at the cross-host link: its estimate is at least half its RecvTime there (its
// receives land in even shares), where the intra-host price of the same bytes is 10–20
// times less.
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
		{4, 2, []int{0, 1, 2, 3}, []mesh.Submesh{sub(1, 2), sub(2, 2), sub(1, 2)}}, // a stage of two hosts
		{2, 2, []int{0, 2, 3}, []mesh.Submesh{sub(1, 2), sub(1, 2)}},               // uneven stages
	}
	crossed := 0
	for _, name0 := range []string{"gpt-tiny", "mlp-tiny", "moe-tiny"} {
		g := model(t, name0)
		for _, p := range pins {
			name := fmt.Sprintf("%s/%dx%d/%v%v", name0, p.hosts, p.perHost, p.bounds, p.subs)
			t.Run(name, func(t *testing.T) {
				c := cluster(t, fmt.Sprintf("p3.16xlarge:%d", p.hosts))
				c.DevicesPerHost = p.perHost
				L := p.bounds[len(p.bounds)-1]
				opts := Options{Microbatches: 2, Layers: L, Constraints: dp.Constraints{Boundaries: p.bounds, StageSubmeshes: p.subs}}
				s, err := Run(context.Background(), g, c, opts, &PhaseConfig{UpTo: "search"})
				require.NoError(t, err)
				res, pl := s.Search, s.Plan
				require.Len(t, pl.Stages, len(res.Stages))
				for i, st := range res.Stages {
					est := st.Cost.Time - pl.Stages[i].Time // StageCost: the stage's own time plus recvEstimate
					got := pl.Stages[i].RecvTime
					assert.LessOrEqual(t, est, got*(1+1e-9)+1e-15, "stage %d on %v: estimate %g, planned %g", i, st.Submesh, est, got)
					if st.Submesh.Devices == p.perHost && got > 0 {
						crossed++
						assert.GreaterOrEqual(t, est, got/2, "stage %d fills its hosts: its receives cross hosts", i)
					}
				}
				assert.LessOrEqual(t, res.Time, pl.Predicted.StepTime*(1+1e-9), "the DP's step of the plan, %g, is under its prediction %g", res.Time, pl.Predicted.StepTime)
			})
		}
	}
	assert.Positive(t, crossed, "some stage filling its hosts receives")
}
