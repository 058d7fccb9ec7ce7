package autopar

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLowerIsBelowRangePlans: the optimistic price of a range of layers (oracle.lower,
// the sum of its layers' fastest points) is at most the price of the range's own ILP plan
// (oracle.solve), w·t + u at the range's weight, run plainly, wherever that plan runs
// plainly within the memory. Round nine saw GPT-1.3B/4's [0,8) on 2×2 priced 57.80 s
// optimistically against a range plan of 57.71 s (docs/DECISIONS.md, "Round ten,
// lowersum"); this sweeps the tiny models, every mesh of five clusters, the device's memory
// and budgets that bind, every range of two or more layers.
func TestLowerIsBelowRangePlans(t *testing.T) {
	if testing.Short() {
		t.Skip("several hundred small ILPs")
	}
	checked, bound, shared, plain := 0, 0, 0, 0
	worst := 0.0
	for _, model := range []string{"mlp-tiny", "gpt-tiny", "moe-tiny", "wresnet-tiny"} {
		for _, cl := range []string{"cpu", "p3.16xlarge"} {
			for _, hd := range [][2]int{{1, 2}, {2, 1}, {1, 4}, {2, 2}, {4, 1}} {
				tc := boundCase{model, cl, hd[0], hd[1], 2, 4}
				o, dc := tc.oracle(t)
				o.mb = tc.b
				for _, mk := range o.meshes(dc) {
					if mk.sub.Hosts*mk.sub.Devices != hd[0]*hd[1] {
						continue // the smaller submeshes are another case's whole cluster
					}
					L := o.lay.L
					free := o.solve(0, L, mk.sub, mk.logical)
					require.True(t, free.ok)
					for _, frac := range []float64{0} {
						o, _ := tc.oracle(t)
						o.mb = tc.b
						if frac > 0 {
							o.memory = int64(frac * free.cost.Memory(1))
						}
						for start := 0; start < L; start++ {
							for end := start + 2; end <= L; end++ {
								sol := o.solve(start, end, mk.sub, mk.logical)
								if !sol.ok || sol.res == nil || sol.res.PeakMemory > o.memory {
									continue // no plain plan fits: nothing to bound
								}
								lo, ok := o.lower(start, end, mk.sub, mk.logical)
								if !ok {
									continue
								}
								followers := 0
								for k := start; k < end; k++ {
									for _, e := range o.infos[k].cross {
										if e.follower && e.from >= start {
											followers++
										}
									}
								}
								w := o.weight(start)
								low, plan := w*lo.Time+lo.Step, w*sol.cost.Time+sol.cost.Step
								checked++
								if !o.disjointLeaves(start, end) {
									shared++
								}
								if plan > 0 {
									worst = max(worst, low/plan)
								}
								if low > plan*(1+1e-9) {
									bound++
								}
								at := fmt.Sprintf("%s %v %v layers %d-%d (leaves disjoint %v, %d follower edges) at %d bytes: optimistic %.9g (t %.9g u %.9g), range plan %.9g (t %.9g u %.9g)",
									tc.name(), mk.sub, mk.logical, start, end-1, o.disjointLeaves(start, end), followers, o.memory, low, lo.Time, lo.Step, plan, sol.cost.Time, sol.cost.Step)
								if followers == 0 {
									plain++
									assert.LessOrEqual(t, low, plan*(1+1e-9), "no follower edge: the layers' sum is a bound: %s", at)
								}
								assert.LessOrEqual(t, low, plan*(1+boundMargin), "beyond the search's margin: %s", at)
								if low > plan*(1+1e-9) {
									t.Logf("above: %s", at)
								}
							}
						}
					}
				}
			}
		}
	}
	t.Logf("%d range plans checked (%d with a leaf shared by two layers, %d without a follower edge), %d under lower's price, largest lower/plan %s", checked, shared, plain, bound, fmt.Sprintf("%.6f", worst))
	assert.Positive(t, plain)
}
