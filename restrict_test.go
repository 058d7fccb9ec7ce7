package autopar

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRestrictedStage: a range of layers priced by its composed plan (restrictStage) runs
// its ops as their layers chose (but where the range merges a follower across a layer
// boundary), from a smaller ILP than the range's; the search reads it through o.solve.
// Below restrictVars (all of these ranges) it is not restricted.
func TestRestrictedStage(t *testing.T) {
	gain := 0 // values as their layers chose, restricted less unrestricted
	defer func(v int) { restrictVars = v }(restrictVars)
	restrictVars = 0 // the tiny models' ranges are below the floor
	for _, tc := range composeCases {
		t.Run(tc.model, func(t *testing.T) {
			o, dc := tc.oracle(t)
			o.fast = true
			if restrictVars == 0 {
				// Below the floor a range is solved by its range ILP.
				restrictVars = 10000
				mk := o.meshes(dc)[len(o.meshes(dc))-1]
				require.True(t, o.composed(0, 2, mk.sub, mk.logical).ok)
				assert.False(t, o.restrictStage(0, 2, mk.sub, mk.logical))
				restrictVars = 0
			}
			ranges, named, same, sameFull := 0, 0, 0, 0
			for _, mk := range o.meshes(dc) {
				for a := 0; a < o.lay.L; a++ {
					for b := a + 2; b <= o.lay.L; b++ {
						cc := o.composed(a, b, mk.sub, mk.logical)
						require.True(t, cc.ok)
						require.True(t, o.restrictStage(a, b, mk.sub, mk.logical), "layers %d-%d on %v", a, b-1, mk)
						k := rangeKey{a, b, mk.sub, mk.logical}
						rs := o.restricted[k]
						assert.False(t, o.exactAt[k].exact)
						assert.Same(t, rs, o.solve(a, b, mk.sub, mk.logical))
						sg, err := o.stage(a, b)
						require.NoError(t, err)
						full := o.solveStage(sg, mk.sub, mk.logical)
						require.True(t, full.ok)
						ranges++
						if mk.sub.Devices*mk.sub.Hosts > 1 {
							assert.Less(t, rs.res.ILP.Variables, full.res.ILP.Variables, "layers %d-%d on %v", a, b-1, mk)
						}
						// The ops run as their layers chose, unless the range merges a follower
						// across the boundary (that node keeps its strategies): more of them
						// than in the range ILP's own plan.
						for i := range sg.g.Values {
							v := &sg.g.Values[i]
							for j, p := range cc.points {
								lg := o.infos[a+j].sg.g
								if id, ok := lg.Lookup(v.Name); ok && lg.Value(id).Op == v.Op {
									named++
									if p.res.Strategies[id].Name == rs.res.Strategies[i].Name {
										same++
									}
									if p.res.Strategies[id].Name == full.res.Strategies[i].Name {
										sameFull++
									}
									break
								}
							}
						}
					}
				}
			}
			t.Logf("%d ranges restricted: %d of %d values as their layers chose (the range ILP's plan: %d)", ranges, same, named, sameFull)
			assert.GreaterOrEqual(t, same, sameFull)
			assert.GreaterOrEqual(t, float64(same), 0.98*float64(named))
			gain += same - sameFull
		})
	}
	assert.Positive(t, gain, "the restriction chose the layers' strategies where the range ILP did not")
}
