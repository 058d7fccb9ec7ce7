package ilp

import "math"

// Exact scaling, the fallback of a solve that lp_solve gave up on numerically
// (NUMFAILURE, ACCURACYERROR). lp_solve's answers went wrong on the sharding ILPs (ACCURACYERROR, or a
// claimed optimum or infeasibility that other settings contradicted) because one row
// mixes byte counts from 2 to 10¹² with seconds-sized costs elsewhere, and its own
// scaling did not recover. Solve therefore hands lp_solve a scaled copy: every row and the
// objective divided by the power of two that brings their largest coefficient into
// [0.5, 1), and every continuous column x replaced by 2^c·x' so that its largest
// row-scaled coefficient is in [0.5, 1) too. Multiplying by a power of two only moves the
// exponent, so the scaled problem is the same problem: the same feasible set (up to
// lp_solve's tolerances, which now apply to comparable numbers) and the same optimum.
// Integer and binary columns are never scaled (that would change integrality).

// maxScaleExp bounds the exponents, far from float64's range.
const maxScaleExp = 200

// expOf returns e such that x·2^-e is in [0.5, 1), for x > 0.
func expOf(x float64) int {
	_, e := math.Frexp(x)
	return e
}

// colExponents returns c with column j scaled as x_j = 2^c[j]·x'_j: 0 for integral
// columns and for continuous columns without row coefficients.
func colExponents(p *Problem) []int {
	col := make([]int, len(p.Vars))
	big := make([]float64, len(p.Vars))
	for i := range p.Rows {
		terms := p.Rows[i].Terms
		rowMax := 0.0
		for _, t := range terms {
			rowMax = math.Max(rowMax, math.Abs(t.Coef))
		}
		if rowMax == 0 {
			continue
		}
		r := expOf(rowMax)
		for _, t := range terms {
			if p.Vars[t.Var].Kind == Continuous {
				big[t.Var] = math.Max(big[t.Var], math.Ldexp(math.Abs(t.Coef), -r))
			}
		}
	}
	for j, b := range big {
		if b > 0 {
			col[j] = min(maxScaleExp, max(-maxScaleExp, -expOf(b)))
		}
	}
	return col
}
