package autopar

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/autopar/autopar/dp"
)

// TestLagTarget: the target of lagRefute's bounds is the cutoff past its headroom, capped
// where the count loses to the best plan known (top plus boundMargin) and at its incumbent.
func TestLagTarget(t *testing.T) {
	inf := math.Inf(1)
	assert.True(t, math.IsInf(lagTarget(0, inf, nil), 1), "nothing known: no target")
	assert.InDelta(t, 50*(1+lagHeadroom), lagTarget(50, inf, nil), 1e-12, "a yield's cutoff, past its headroom")
	assert.InDelta(t, 51*(1+boundMargin), lagTarget(52, 51, nil), 1e-12, "never past where the count loses")
	assert.InDelta(t, 50.5, lagTarget(50, 51, &dp.Result{Time: 50.5}), 1e-12, "never past the incumbent")
	assert.InDelta(t, 52.0, lagTarget(0, inf, &dp.Result{Time: 52}), 1e-12, "the incumbent alone")
}
