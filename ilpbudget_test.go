package autopar

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
