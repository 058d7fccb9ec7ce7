package autopar

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/ilp"
	"github.com/autopar/autopar/mesh"
	"github.com/autopar/autopar/passes/sharding"
)

// TestRangeStartHoldsTheComposedPlan: in the fast search, every range of several layers
// has a start (rangeStart) whose known plans include the composition's (composedAt), named
// for every value of the range's graph. Its ILP stopped at once by its effort limit (one
// simplex iteration) has no point of lp_solve's; with the start it answers, where the ILP
// holds a known plan that fits, with that plan, within the memory. A one-layer stage, and
// the exhaustive search, get no start.
func TestRangeStartHoldsTheComposedPlan(t *testing.T) {
	for _, tc := range composeCases {
		t.Run(tc.model, func(t *testing.T) {
			o, dc := tc.oracle(t)
			one, err := o.stage(0, 1)
			require.NoError(t, err)
			mk := o.meshes(dc)[0]
			o.fast = false
			require.Nil(t, o.rangeStart(one, mk.sub, mk.logical))
			o.fast = true
			o.prefetch(o.lay.L, dc, nil)
			require.Nil(t, o.rangeStart(one, mk.sub, mk.logical))
			held := 0
			for _, mk := range o.meshes(dc) {
				lm, err := mesh.NewLogicalMesh(o.c, mk.sub, mk.logical[0], mk.logical[1])
				require.NoError(t, err)
				for a := 0; a < o.lay.L; a++ {
					for b := a + 2; b <= o.lay.L; b++ {
						require.True(t, o.composed(a, b, mk.sub, mk.logical).ok)
						sg, err := o.stage(a, b)
						require.NoError(t, err)
						start := o.rangeStart(sg, mk.sub, mk.logical)
						require.NotNil(t, start, "layers %d-%d on %v", a, b-1, mk)
						require.NotEmpty(t, start.known, "layers %d-%d on %v", a, b-1, mk)
						for _, plan := range start.known {
							require.Len(t, plan, len(sg.g.Values))
							for _, name := range plan {
								require.NotEmpty(t, name)
							}
						}
						opts := o.solveOptions(sg, mk.sub, mk.logical, o.memory)
						opts.LPSolveOnly, opts.Iterations = true, 1 // lp_solve, not the certificate, answers
						_, err = sg.solve(context.Background(), lm, opts)
						var me *sharding.MemoryError
						if errors.As(err, &me) {
							continue
						}
						require.ErrorIs(t, err, ilp.ErrTimeout, "layers %d-%d on %v", a, b-1, mk)
						opts.Known = start.known
						got, err := sg.solve(context.Background(), lm, opts)
						if err != nil {
							require.ErrorIs(t, err, ilp.ErrTimeout) // no known plan held (merged across layers) or fits
							continue
						}
						held++
						assert.LessOrEqual(t, got.PeakMemory, o.memory, "layers %d-%d on %v", a, b-1, mk)
					}
				}
			}
			assert.Positive(t, held, "some ranges' ILPs hold a known plan")
		})
	}
}
