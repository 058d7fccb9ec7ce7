package autopar

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDataParallelStepGrowsOnlyPerMicrobatch: a data-parallel plan's gradient sync and
// update run once per step, so its predicted step time is B·t + u with u (the step part)
// the same for every micro-batch count: more micro-batches add only micro-batch time.
func TestDataParallelStepGrowsOnlyPerMicrobatch(t *testing.T) {
	for _, tc := range []struct{ model, cluster string }{{"gpt-tiny", "cpu:4"}} {
		t.Run(tc.model, func(t *testing.T) {
			g, c := model(t, tc.model), cluster(t, tc.cluster)
			var u0 float64
			for _, b := range []int{1, 2} { // gpt-tiny has 8 sequences: 4 per device at most
				p := compile(t, g, c, Options{Microbatches: b, Manual: &Manual{TP: 1, PP: 1, DP: 4}})
				name := fmt.Sprintf("%d micro-batches", b)
				require.Len(t, p.Stages, 1, name)
				s, pr := p.Stages[0], p.Predicted
				assert.Greater(t, pr.Sync, 0.0, "%s: data parallelism syncs gradients", name)
				assert.InDelta(t, s.StepTime, pr.Sync+pr.Update, 1e-12, name)
				assert.InDelta(t, s.Cost.Total, s.Time+s.StepTime, 1e-12*s.Cost.Total, name)
				assert.InEpsilon(t, float64(b)*s.Time+s.StepTime, pr.StepTime, 1e-9, name)
				if b == 1 {
					u0 = s.StepTime
					continue
				}
				assert.InEpsilon(t, u0, s.StepTime, 1e-9, "%s: the step part does not depend on B", name)
				assert.Less(t, pr.StepTime, float64(b)*(s.Time+s.StepTime), "%s: the sync is not paid per micro-batch", name)
			}
		})
	}
}
