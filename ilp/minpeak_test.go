package ilp

import (
	"context"
	"encoding/json"
	"math"
	"math/big"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The recorded min-peak ILP (testdata/minpeak.json: peak − Σ bytes·s ≥ 0 per point, bytes
// to 5.5·10¹¹, peak about 1.13·10¹²) comes back with its peak a few ulps under the sum of
// its binding row: the row's exact left-hand side (in 200-bit arithmetic) is −0.0037,
// 3·10⁻¹⁵ of the row's terms, under lp_solve's feasibility tolerance of the scaled model
// it solved (scale.go) and under the rounding of any float64 sum of those terms (an ulp of
// 10¹² is 1.2·10⁻⁴). Evaluate used to judge a row of right-hand side 0 to 10⁻⁶ absolute and
// called that point infeasible; it now scales a row's tolerance by its largest term, so
// the point passes while a real shortfall at that scale (10⁻⁵ of the peak) and a small
// row's 2·10⁻⁶ still fail. Harmless for the plans either way: the sharding pass reads the
// min-peak plan's peak from its choice (planner.peakOf), not from this variable.
func TestMinPeakRowIsFeasibleAtItsScale(t *testing.T) {
	raw, err := os.ReadFile("testdata/minpeak.json")
	require.NoError(t, err)
	var p Problem
	require.NoError(t, json.Unmarshal(raw, &p))
	sol, err := Solve(context.Background(), &p, Options{})
	require.NoError(t, err)
	ev := Evaluate(&p, sol.Values)
	require.NoError(t, ev.Err(), "lp_solve's min-peak point is feasible at its rows' scale")

	peak := p.Objective[0].Var
	worst, worstScale := 0.0, 0.0
	for _, r := range p.Rows {
		exact, scale := new(big.Float).SetPrec(200), 0.0
		for _, tm := range r.Terms {
			x := new(big.Float).SetPrec(200).SetFloat64(tm.Coef)
			exact.Add(exact, x.Mul(x, new(big.Float).SetPrec(200).SetFloat64(sol.Values[tm.Var])))
			scale = math.Max(scale, math.Abs(tm.Coef*sol.Values[tm.Var]))
		}
		lhs, _ := exact.Float64()
		if short := r.RHS - lhs; r.Sense == GE && short > worst {
			worst, worstScale = short, scale
		}
	}
	t.Logf("peak %.17g; the most any row is short, exactly: %g of a row of scale %g", sol.Values[peak], worst, worstScale)
	assert.LessOrEqual(t, worst, 1e-12*worstScale, "short by rounding only")

	low := append([]float64(nil), sol.Values...)
	low[peak] *= 1 - 1e-5
	ev = Evaluate(&p, low)
	assert.NotEmpty(t, ev.Rows, "a peak 10⁻⁵ too low violates its rows")

	var q Problem
	a, b := q.AddBinary("a"), q.AddBinary("b")
	q.AddRow("one", []Term{{Var: a, Coef: 1}, {Var: b, Coef: 1}}, EQ, 1)
	ev = Evaluate(&q, []float64{1 - 2e-6, 0})
	assert.Len(t, ev.Rows, 1, "a row of scale 1 is still judged to 10⁻⁶")
}
