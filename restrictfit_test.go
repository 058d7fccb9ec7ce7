package autopar

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/autopar/autopar/dp"
	"github.com/autopar/autopar/passes"
)

// TestWeighedTakesAWayThatFits: openRestricted keeps the cheaper of a whole-network stage's
// restricted plan and its range ILP's plan by weighedAt, which prices each by its least way
// that fits the memory with one micro-batch in flight, and a pipeline stage's by its plain
// way. A restricted plan whose plain way overflows (its recomputing ways fit) is dearer than
// a range plan that fits plainly at a higher plain price, the case of GPT-2.6B/8's [0,8) on
// 2×4 at 64 µb (docs/DECISIONS.md, "Round twelve, integral"); with no way that fits, a plan
// weighs +Inf.
func TestWeighedTakesAWayThatFits(t *testing.T) {
	const gib = 1 << 30
	o := &oracle{mb: 64, memory: 16 * gib, remat: RematAuto, lay: &passes.Layering{L: 8}}
	whole, part := rangeKey{start: 0, end: 8}, rangeKey{start: 3, end: 8}
	restricted := &stageSolution{ok: true,
		cost:   dp.StageCost{Time: 0.650, Step: 0.108, WeightBytes: 8 * gib, ActBytes: 10 * gib},
		remats: []dp.StageCost{{Time: 0.898, Step: 0.108, WeightBytes: 8 * gib, OnceBytes: 2 * gib, Recompute: true}}}
	solved := &stageSolution{ok: true,
		cost: dp.StageCost{Time: 0.671, Step: 0.158, WeightBytes: 10 * gib, ActBytes: 5 * gib}}
	assert.InDelta(t, 64*0.898+0.108, o.weighedAt(whole, restricted), 1e-9)
	assert.InDelta(t, 64*0.671+0.158, o.weighedAt(whole, solved), 1e-9)
	assert.Less(t, o.weighedAt(whole, solved), o.weighedAt(whole, restricted))

	assert.InDelta(t, 64*0.650+0.108, o.weighedAt(part, restricted), 1e-9)

	o.remat = RematNone // the plain way only: it overflows
	assert.True(t, math.IsInf(o.weighedAt(whole, restricted), 1))
	assert.InDelta(t, 64*0.671+0.158, o.weighedAt(whole, solved), 1e-9)
}
