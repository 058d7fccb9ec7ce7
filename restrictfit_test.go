package autopar

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/autopar/autopar/dp"
)

// TestWeighedTakesAWayThatFits: openRestricted keeps the cheaper of a stage's restricted plan
// and its range ILP's plan by weighed, which prices each by its least way that fits the
// memory with one micro-batch in flight. A restricted plan whose plain way overflows (its
// recomputing ways fit) is dearer than a range plan that fits plainly at a higher plain
// price, the case of GPT-2.6B/8's [0,8) on 2×4 at 64 µb (docs/DECISIONS.md, "Round twelve,
// integral"); with no way that fits, a plan weighs +Inf.
func TestWeighedTakesAWayThatFits(t *testing.T) {
	const gib = 1 << 30
	o := &oracle{mb: 64, memory: 16 * gib, remat: RematAuto}
	restricted := &stageSolution{ok: true,
		cost:   dp.StageCost{Time: 0.650, Step: 0.108, WeightBytes: 8 * gib, ActBytes: 10 * gib},
		remats: []dp.StageCost{{Time: 0.898, Step: 0.108, WeightBytes: 8 * gib, OnceBytes: 2 * gib, Recompute: true}}}
	solved := &stageSolution{ok: true,
		cost: dp.StageCost{Time: 0.671, Step: 0.158, WeightBytes: 10 * gib, ActBytes: 5 * gib}}
	assert.InDelta(t, 64*0.898+0.108, o.weighed(restricted), 1e-9)
	assert.InDelta(t, 64*0.671+0.158, o.weighed(solved), 1e-9)
	assert.Less(t, o.weighed(solved), o.weighed(restricted))

	o.remat = RematNone // the plain way only: it overflows
	assert.True(t, math.IsInf(o.weighed(restricted), 1))
	assert.InDelta(t, 64*0.671+0.158, o.weighed(solved), 1e-9)
}
