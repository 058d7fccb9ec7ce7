package autopar

import (
	"context"
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/dp"
)

// TestBeatenRangeNotOpened: openRestricted leaves the range ILP of a restricted
// whole-network stage unsolved where the range's proven bound (rangeLeast) is above the
// fastest plan known (o.top), and makes its restricted price final, as where that ILP ends
// without a plan; where the bound is not above top, or there is no top, or the range is not
// the whole network, it solves the range ILP as before; unrestrict likewise. rangeLeast takes the highest of
// the proven bounds, the lesser of the Lagrangian's two ways, and nothing from a guess.
func TestBeatenRangeNotOpened(t *testing.T) {
	defer func(v int) { restrictVars = v }(restrictVars)
	restrictVars = 0
	tc := boundCase{"mlp-tiny", "cpu", 1, 4, 4, 3}
	o0, dc := tc.oracle(t)
	L := o0.lay.L
	checked, relaxedSeen := 0, 0
	for _, mk := range o0.meshes(dc) {
		if mk.sub.NumDevices() == 1 {
			continue
		}
		at := fmt.Sprintf("%v %v", mk.sub, mk.logical)
		k := rangeKey{0, L, mk.sub, mk.logical}
		// setUp is an oracle with k priced by its restricted plan under a budget that binds,
		// or nil where the range is not restricted there.
		setUp := func() *oracle {
			o, _ := tc.oracle(t)
			o.mb, o.fast = tc.b, true
			sg, err := o.stage(0, L)
			require.NoError(t, err, at)
			free := o.solveRelaxed(sg, mk.sub, mk.logical)
			require.True(t, free.ok, at)
			o.memory = free.res.PeakMemory * 97 / 100
			if cc := o.composed(0, L, mk.sub, mk.logical); !cc.ok || !o.restrictStage(0, L, mk.sub, mk.logical) {
				return nil
			}
			clear(o.relaxed) // rangeLeast's bound from the Lagrangian alone, but where a test sets it
			return o
		}
		opt := func(o *oracle) *dp.Result {
			return &dp.Result{Stages: []dp.Stage{{Start: 0, End: L, Submesh: mk.sub, Logical: mk.logical, Cost: o.exactAt[k].cost}}}
		}
		o := setUp()
		if o == nil {
			continue
		}
		checked++
		sg, err := o.stage(0, L)
		require.NoError(t, err, at)
		key := solveKey{sg.hash, mk.sub, mk.logical}
		// The range's relaxed solve bounds it as rangeFloor does, unless its ILP priced some
		// value per consumer.
		if r := o.rangeRelaxed(sg, mk.sub, mk.logical); r != nil && sg.weighsAsPriced() {
			assert.Equal(t, float64(tc.b)*r.cost.Time+r.cost.Step, o.rangeLeast(k), at)
			r.res.ILP.PerEdgeValues++
			assert.True(t, math.IsInf(o.rangeLeast(k), -1), at)
			r.res.ILP.PerEdgeValues--
			relaxedSeen++
		}
		clear(o.relaxed)
		restricted := o.restricted[k]
		price := o.weighed(restricted)

		// Beaten: its bound above top. No range ILP; the restricted price is final.
		o.lagDuals = map[rangeKey][2]float64{k: {price / 2, price}} // the plain way is the lesser
		o.top = price/2 - 1e-6
		assert.Equal(t, price/2, o.rangeLeast(k), at)
		solves := o.solves.Load()
		// unrestrict (exactly's rounds ended unproven) keeps it as it is too.
		p := opt(o)
		assert.Same(t, p, o.unrestrict(context.Background(), L, dc, dp.Options{Microbatches: tc.b}, p, nil), at)
		assert.Equal(t, solves, o.solves.Load(), "%s: unrestrict solved a range ILP", at)
		assert.Same(t, restricted, o.restricted[k], at)
		require.True(t, o.openRestricted(opt(o), nil), at)
		assert.Equal(t, solves, o.solves.Load(), "%s: a range ILP solved", at)
		_, ran := o.solved[key]
		assert.False(t, ran, at)
		assert.True(t, o.exactAt[k].exact, at)
		assert.Equal(t, restricted.costFor(o.remat), o.exactAt[k].cost, at)
		assert.Same(t, restricted, o.restricted[k], at)

		// Not beaten: the bound at top, no plan known, or not the fast search: the range ILP runs.
		for name, set := range map[string]func(*oracle){
			"at top":   func(o *oracle) { o.top = price / 2 },
			"no top":   func(o *oracle) { o.top = math.Inf(1) },
			"not fast": func(o *oracle) { o.fast, o.top = false, price/2-1e-6 },
		} {
			o := setUp()
			require.NotNil(t, o, at)
			o.lagDuals = map[rangeKey][2]float64{k: {price / 2, price}}
			set(o)
			solves := o.solves.Load()
			if name == "at top, unrestrict" {
				// unrestrict solves the range ILP (recost without restriction).
				p := opt(o)
				o.unrestrict(context.Background(), L, dc, dp.Options{Microbatches: tc.b}, p, nil)
				assert.Greater(t, o.solves.Load(), solves, "%s: unrestrict ran no range ILP", at)
				continue
			}
			require.True(t, o.openRestricted(opt(o), nil), "%s: %s", at, name)
			assert.Greater(t, o.solves.Load(), solves, "%s: %s: no range ILP", at, name)
			_, ran := o.solved[key]
			assert.True(t, ran, "%s: %s", at, name)
		}
	}
	assert.Positive(t, checked)
	assert.Positive(t, relaxedSeen)

	// rangeLeast: the highest proven bound, −Inf with none; not for a range short of the
	// whole network.
	o, _ := tc.oracle(t)
	o.mb, o.fast = tc.b, true
	mk := o.meshes(dc)[len(o.meshes(dc))-1]
	k := rangeKey{0, L, mk.sub, mk.logical}
	assert.True(t, math.IsInf(o.rangeLeast(k), -1))
	o.duals = map[rangeKey]float64{k: 3}
	o.lagDuals = map[rangeKey][2]float64{k: {5, 4}}
	assert.Equal(t, 4.0, o.rangeLeast(k))
	o.duals[k] = 6
	assert.Equal(t, 6.0, o.rangeLeast(k))
	o.top = 5
	assert.True(t, o.beaten(k))
	part := rangeKey{0, L - 1, mk.sub, mk.logical}
	o.duals[part] = 100
	assert.False(t, o.beaten(part), "a pipeline's stage bounds no step")
}
