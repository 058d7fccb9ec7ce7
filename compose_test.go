package autopar

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestComposeExact checks the composition (compose.go) against the range's own ILP on every
// layer range and mesh of small models, memory not binding: a composed price marked exact
// equals the ILP's. It logs how far the others are.
func TestComposeExact(t *testing.T) {
	for _, tc := range composeCases {
		t.Run(tc.model, func(t *testing.T) {
			o, dc := tc.oracle(t)
			o.fast = true
			o.prefetch(o.lay.L, dc, nil)
			exact, worst := 0, 0.0
			for _, mk := range o.meshes(dc) {
				for a := 0; a < o.lay.L; a++ {
					for b := a + 1; b <= o.lay.L; b++ {
						cc := o.composed(a, b, mk.sub, mk.logical)
						sol := o.solve(a, b, mk.sub, mk.logical)
						require.True(t, cc.ok && sol.ok, "layers %d-%d on %v %v", a, b-1, mk.sub, mk.logical)
						ilp, got := sol.cost.Time+sol.cost.Step, cc.cost.Time+cc.cost.Step
						if cc.exact {
							exact++
							assert.InEpsilon(t, ilp, got, 1e-9, "exact composition, layers %d-%d on %v", a, b-1, mk)
						} else {
							worst = max(worst, abs(got/ilp-1))
						}
					}
				}
			}
			t.Logf("%d compositions exact; the worst inexact one %.2f%% off its ILP", exact, 100*worst)
			assert.Positive(t, exact, "some compositions are exact")
		})
	}
}

func abs(x float64) float64 { return max(x, -x) }

// composeCases are small models on one host whose every layer range the composition
// tests price both ways (boundCase.oracle; the fast search's oracle sets fast).
var composeCases = []boundCase{
	{"mlp-tiny", "cpu", 1, 4, 2, 3},
	{"gpt-tiny", "dgx-a100", 1, 2, 1, 3},
}
