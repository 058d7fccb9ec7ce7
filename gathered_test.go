package autopar

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// measuredPeaks runs p's programs once on the runtime and returns every device's measured
// peak memory, by device.
func measuredPeaks(t *testing.T, p *Plan) map[int]int64 {
	t.Helper()
	progs, err := p.Programs()
	require.NoError(t, err)
	got := runStep(t, p, progs)
	out := map[int]int64{}
	for _, d := range got.Devices {
		out[int(d.Device)] = d.PeakBytes
	}
	return out
}

// TestPlanMemoryCountsHeldLayouts: on mlp-tiny's two-stage plan (cpu:4, tp=1,pp=2,dp=2),
// stage 1 stores logits.w replicated and d.l1.relu reads it split (S0R): codegen's
// prologue makes that 640-byte copy (32×10 f32 over 2) once and keeps it for the step.
// The plan's memory counts it, so every device's measured peak is within its stage's
// predicted memory; without the copy stage 1's prediction (7,044 bytes) would be under
// the 7,124 its devices measure.
func TestPlanMemoryCountsHeldLayouts(t *testing.T) {
	p := compile(t, model(t, "mlp-tiny"), cluster(t, "cpu:4"), Options{Microbatches: 2, Manual: &Manual{TP: 1, PP: 2, DP: 2}})
	require.Len(t, p.Stages, 2)
	var held bool
	for _, v := range p.Stages[1].Values {
		if v.Name == "logits.w" {
			require.Equal(t, "RR", v.Spec.String())
		}
		if v.Name == "d.l1.relu" {
			held = v.In[1].String() == "S0R"
		}
	}
	require.True(t, held, "d.l1.relu reads logits.w as S0R")
	peaks := measuredPeaks(t, p)
	require.Len(t, peaks, 4)
	const copyBytes = 32 * 10 * 4 / 2
	for si, s := range p.Stages {
		for _, d := range s.Devices {
			got, ok := peaks[d]
			require.True(t, ok, "device %d ran", d)
			require.LessOrEqual(t, got, s.MemoryBytes, "device %d: measured peak within stage %d's predicted memory", d, si)
			if si == 1 {
				require.Greater(t, got, s.MemoryBytes-copyBytes, "device %d: the held copy is needed to bound the measured peak", d)
			}
		}
	}
}
