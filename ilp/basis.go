package ilp

import (
	"fmt"
	"math"
)

// Warm starts. A caller that solves one problem again after a small change — another
// right-hand side for some rows, rows or variables appended — can start lp_solve's
// simplex from the basis the last solve ended with (Solution.Basis, given back as
// Options.Start) instead of from the all-slack basis. The start changes the path of the
// search, never what it proves: Solve still returns an optimum (Status Optimal) of the
// problem given, the same objective a cold solve proves, though on a problem with several
// optima it may be another of them. Solve's answer is a function of the problem and the
// start, so the memo keys on both.

// BasisStatus says where a variable, or a row's slack, sits in a simplex basis.
type BasisStatus int8

const (
	// AtLower: nonbasic at its lower bound.
	AtLower BasisStatus = iota
	// AtUpper: nonbasic at its upper bound.
	AtUpper
	// Basic: in the basis.
	Basic
)

// Basis is a simplex basis of a problem: one status per variable and one per row (its
// slack). A valid basis has exactly as many Basic entries as rows. Solve never modifies
// a Basis, and callers must not either once it is handed to Solve or returned by it.
type Basis struct {
	Vars []BasisStatus
	Rows []BasisStatus
}

// extend returns b made complete for p, which must have at least b's rows and variables
// and whose first rows and variables are b's problem's: p's further rows start with
// their slacks basic and its further variables at a finite bound (the lower one when it
// is finite), which keeps a valid basis valid. It reports a start that cannot be one.
func (b *Basis) extend(p *Problem) (*Basis, error) {
	if len(b.Rows) > len(p.Rows) || len(b.Vars) > len(p.Vars) {
		return nil, fmt.Errorf("ilp: start basis of %d rows and %d variables is larger than the problem (%d rows, %d variables)",
			len(b.Rows), len(b.Vars), len(p.Rows), len(p.Vars))
	}
	e := &Basis{Rows: make([]BasisStatus, len(p.Rows)), Vars: make([]BasisStatus, len(p.Vars))}
	copy(e.Rows, b.Rows)
	copy(e.Vars, b.Vars)
	for i := len(b.Rows); i < len(p.Rows); i++ {
		e.Rows[i] = Basic
	}
	for j := len(b.Vars); j < len(p.Vars); j++ {
		if v := p.Vars[j]; math.IsInf(v.Lo, -1) && !math.IsInf(v.Hi, 1) {
			e.Vars[j] = AtUpper
		}
	}
	basic := 0
	for _, ss := range [][]BasisStatus{e.Rows, e.Vars} {
		for _, s := range ss {
			if s > Basic || s < AtLower {
				return nil, fmt.Errorf("ilp: start basis has unknown status %d", s)
			}
			if s == Basic {
				basic++
			}
		}
	}
	if basic != len(p.Rows) {
		return nil, fmt.Errorf("ilp: start basis has %d basic entries for %d rows", basic, len(p.Rows))
	}
	return e, nil
}
