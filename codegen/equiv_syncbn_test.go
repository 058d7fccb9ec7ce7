package codegen_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/mesh"
	"github.com/autopar/autopar/program"
)

// Data-parallel batch norm (synchronized): with the batch split, every batch_norm runs on
// its shard with the batch's statistics, two all-reduces of its channels (mean, variance)
// over the batch's axes; the step equals the serial one to f64 rounding, and every device
// runs exactly those all-reduces for every batch_norm.
func TestEquivSyncBatchNorm(t *testing.T) {
	g := wresnet(t)
	var bns []string
	for i := range g.Values {
		if g.Values[i].Op == ir.OpBatchNorm {
			bns = append(bns, g.Values[i].Name)
		}
	}
	require.NotEmpty(t, bns)
	cases := []equivCase{
		{name: "1x2", fwd: wresnet, opt: sgd, b: 1, plan: singleStage(1, 2, 1, dataParallel(mesh.Axis1), propagate)},
		{name: "2x2", fwd: wresnet, opt: adam, b: 1, plan: singleStage(2, 2, 1, dataParallel(mesh.AxesBoth), propagate)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			progs := runEquiv(t, c)
			for _, p := range progs {
				sync := map[string]int{}
				for _, in := range p.Instrs {
					if in.Kind == program.AllReduce {
						sync[in.Note]++
					}
				}
				for _, bn := range bns {
					require.Equal(t, 2, sync[bn], "device %d: the all-reduces of %s's mean and variance", p.Device, bn)
				}
			}
		})
	}
}
