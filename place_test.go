package autopar

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/autopar/autopar/dp"
	"github.com/autopar/autopar/mesh"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPlaceByTransfers: five pinned stages of 2, 1, 1, 2, 2 devices on 2 hosts of 4
// (p3.16xlarge links). The DP places them where it priced their receives (on its ring,
// dp.Result.Placed; placeByTransfers places only plans it did not): valid devices,
// pipeline neighbours sharing hosts where largest-first did not, a predicted step no
// slower than the largest-first placement's (re-priced the same way), and the programs
// equal the serial interpreter.
func TestPlaceByTransfers(t *testing.T) {
	sub := func(d int) mesh.Submesh { return mesh.Submesh{Hosts: 1, Devices: d} }
	for _, name := range []string{"gpt-tiny", "mlp-tiny"} {
		t.Run(name, func(t *testing.T) {
			c := cluster(t, "p3.16xlarge:2")
			c.DevicesPerHost = 4
			opts := Options{Microbatches: 2, Layers: 5, Constraints: dp.Constraints{Boundaries: []int{0, 1, 2, 3, 4, 5},
				StageSubmeshes: []mesh.Submesh{sub(2), sub(1), sub(1), sub(2), sub(2)}}}
			p, err := Compile(context.Background(), model(t, name), c, opts)
			require.NoError(t, err)
			require.Len(t, p.Stages, 5)
			host := func(i int) int { return p.Stages[i].Devices[0] / c.DevicesPerHost }
			seen := map[int]bool{}
			for i, s := range p.Stages {
				n := s.Submesh.NumDevices()
				require.Len(t, s.Devices, n)
				assert.Equal(t, host(i), s.Devices[n-1]/c.DevicesPerHost, "stage %d at %v straddles hosts", i, s.Devices)
				for j, d := range s.Devices {
					assert.Equal(t, s.Devices[0]+j, d)
					assert.False(t, seen[d])
					seen[d] = true
				}
			}
			assert.Len(t, seen, c.Devices())
			together := 0
			for i := 1; i < 5; i++ {
				if host(i) == host(i-1) {
					together++
				}
			}
			assert.GreaterOrEqual(t, together, 2, "neighbours on one host: %v", devicesOf(p))
			got := p.Predicted.StepTime
			// largest first (the old dp.Place): 0 and 3 on host 0, 4, 1 and 2 on host 1
			old := *p
			old.Stages = slices.Clone(p.Stages)
			order := []int{0, 1, 2, 3, 4}
			slices.SortStableFunc(order, func(a, b int) int {
				return cmp.Compare(old.Stages[b].Submesh.NumDevices(), old.Stages[a].Submesh.NumDevices())
			})
			next := 0
			for _, i := range order {
				n := old.Stages[i].Submesh.NumDevices()
				old.Stages[i].Devices = nil
				for j := range n {
					old.Stages[i].Devices = append(old.Stages[i].Devices, next+j)
				}
				next += n
				old.Stages[i].RecvTime, old.Stages[i].StepRecvTime = 0, 0
			}
			old.priceTransfers()
			predict(&old.Plan, old.Step(), &old.Cluster)
			t.Logf("%s: predicted step %.6g s placed by the DP %v, %.6g s largest first %v", name, got, devicesOf(p), old.Predicted.StepTime, devicesOf(&old))
			assert.LessOrEqual(t, got, old.Predicted.StepTime)
			checkAgainstSerial(t, p, 1e-4)
			// A plan the DP did not place is placed by what its stages pass.
			re := old
			re.Stages = slices.Clone(old.Stages)
			for i := range re.Stages {
				re.Stages[i].RecvTime, re.Stages[i].StepRecvTime = 0, 0
			}
			re.placeByTransfers()
			re.priceTransfers()
			predict(&re.Plan, re.Step(), &re.Cluster)
			t.Logf("%s: placed by transfers %v: %.6g s", name, devicesOf(&re), re.Predicted.StepTime)
			assert.NotEqual(t, devicesOf(&old), devicesOf(&re))
			assert.LessOrEqual(t, re.Predicted.StepTime, old.Predicted.StepTime)
			checkAgainstSerial(t, &re, 1e-4)
		})
	}
}

func devicesOf(p *Plan) string {
	var s []string
	for _, st := range p.Stages {
		s = append(s, fmt.Sprint(st.Devices))
	}
	return fmt.Sprint(s)
}
