package autopar

import (
	"bytes"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/ilp"
)

// The search's sharding solves run under an effort budget (Options.ILPIterations), which
// the plan records so that explain redoes them alike: the default when none is given, "no
// limit" when negative, and the default again for a plan written before it was recorded.
func TestILPIterationsRecorded(t *testing.T) {
	g, c := model(t, "mlp-tiny"), cluster(t, "cpu:4")
	assert.Equal(t, int64(DefaultILPIterations), Options{}.withDefaults().ILPIterations)

	p := compile(t, g, c, Options{Microbatches: 2})
	assert.Equal(t, int64(DefaultILPIterations), p.ILPIterations)
	var a bytes.Buffer
	require.NoError(t, p.WriteJSON(&a))
	assert.Contains(t, a.String(), `"ilp_iterations": 40000`)

	p.ILPIterations = 0 // as read from an older plan.json
	assert.Equal(t, int64(DefaultILPIterations), p.ilpIterations())

	q := compile(t, g, c, Options{Microbatches: 2, ILPIterations: -1})
	assert.Equal(t, int64(-1), q.ilpIterations())
	assert.Equal(t, p.Predicted, q.Predicted, "mlp-tiny's ILPs are far inside the budget")
}

// Options.LPSolveOnly sends every sharding ILP to lp_solve: the plan records it (explain
// redoes the solves alike), lp_solve sees more ILPs than when the message-passing
// certificate answers first, and the optimum is the same.
func TestLPSolveOnly(t *testing.T) {
	g, c := model(t, "mlp-tiny"), cluster(t, "cpu:4")
	calls := func(opts Options) (*Plan, int) {
		var mu sync.Mutex
		n := 0
		defer ilp.Trace(func(*ilp.Problem, ilp.Stats) { mu.Lock(); n++; mu.Unlock() })()
		p := compile(t, g, c, opts)
		return p, n
	}
	p, viaCert := calls(Options{Microbatches: 2})
	q, viaLP := calls(Options{Microbatches: 2, LPSolveOnly: true})
	assert.False(t, p.LPSolveOnly)
	assert.True(t, q.LPSolveOnly)
	assert.Greater(t, viaLP, viaCert, "the certificate answers some of mlp-tiny's ILPs")
	assert.InDelta(t, p.Predicted.StepTime, q.Predicted.StepTime, 1e-9*p.Predicted.StepTime)

	var a bytes.Buffer
	require.NoError(t, q.WriteJSON(&a))
	assert.Contains(t, a.String(), `"lp_solve_only": true`)
}
