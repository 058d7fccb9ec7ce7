package autopar

import (
	"context"
	"math"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/passes"
)

// TestChooseLayering compiles gpt-tiny on two hosts of two devices, whose first plans (the
// seed and the host pipeline, here the same two stages) put layer 0 and layer 1 on
// different hosts: over a slow link the output projection's part in layer 0 pulls the
// logits' adjoint across it each micro-batch, and the search keeps the moved layering;
// over a fast one the two price alike and it keeps the base. Either way the layering kept
// is the one chooseLayering's prices pick, and a compile from the saved plan
// (Options.From) takes the same layering and re-costs the same step.
func TestChooseLayering(t *testing.T) {
	defer func(f func(int, float64, float64)) { layeringTrace = f }(layeringTrace)
	g := model(t, "gpt-tiny")
	kept := map[bool]bool{}
	for _, interHost := range []float64{1e6, 1e15} {
		c := cluster(t, "dgx-a100:2")
		c.DevicesPerHost = 2
		c.InterHostBandwidth = interHost
		var base, moved float64
		layeringTrace = func(_ int, b, m float64) { base, moved = b, m }
		opts := Options{Microbatches: 4, Layers: 2}
		s, err := Run(context.Background(), g, c, opts, &PhaseConfig{UpTo: "search", Check: true})
		require.NoError(t, err)
		require.NotNil(t, s.Plan)
		b, m, err := passes.ClusterLayerings(s.Step, passes.ClusterOptions{Layers: 2})
		require.NoError(t, err)
		require.NotNil(t, m, "gpt-tiny's output projection part moves")
		require.True(t, !math.IsInf(base, 1) && !math.IsInf(moved, 1), "link %g: first plans %g and %g", interHost, base, moved)
		want := moved < base*(1-movedMargin)
		kept[want] = true
		t.Logf("link %g: first plans %g s (base), %g s (moved)", interHost, base, moved)
		assert.Equal(t, want, slices.Equal(s.Layering.Of, m.Of), "link %g: first plans %g (base) and %g (moved)", interHost, base, moved)
		assert.Equal(t, !want, slices.Equal(s.Layering.Of, b.Of), "link %g: base layering kept", interHost)

		again, err := Run(context.Background(), g, c, Options{From: s.Plan}, &PhaseConfig{UpTo: "search", Check: true})
		require.NoError(t, err)
		assert.True(t, slices.Equal(again.Layering.Of, s.Layering.Of), "link %g: the saved plan's layering", interHost)
		assert.InDelta(t, s.Plan.Predicted.StepTime, again.Plan.Predicted.StepTime, 1e-12*s.Plan.Predicted.StepTime, "link %g: re-costed", interHost)
	}
	assert.True(t, kept[true] && kept[false], "the two links keep different layerings: %v", kept)
}
