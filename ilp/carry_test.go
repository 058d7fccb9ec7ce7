package ilp

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// named gives every variable and row of p a name by its index.
func nameAll(p *Problem) {
	for j := range p.Vars {
		p.Vars[j].Name = fmt.Sprintf("x%d", j)
	}
	for i := range p.Rows {
		p.Rows[i].Name = fmt.Sprintf("r%d", i)
	}
}

// shifted is p with a variable and a row of their own first (so that every name of p sits
// one index later), p's first variable renamed (so that it starts cold) and, where drop,
// p's last row left out.
func shifted(p *Problem, drop bool) *Problem {
	q := &Problem{}
	extra := q.AddBinary("extra")
	move := func(ts []Term) []Term {
		out := make([]Term, len(ts))
		for i, t := range ts {
			out[i] = Term{t.Var + 1, t.Coef}
		}
		return out
	}
	for j, v := range p.Vars {
		if j == 0 {
			v.Name = "renamed"
		}
		q.addVar(v)
	}
	q.AddRow("extra.row", []Term{{extra, 1}, {1, 1}}, LE, 1)
	rows := p.Rows
	if drop {
		rows = rows[:len(rows)-1]
	}
	for _, r := range rows {
		q.AddRow(r.Name, move(r.Terms), r.Sense, r.RHS)
	}
	q.SetObjective(append(move(p.Objective), Term{extra, 0.5}), p.ObjConstant)
	return q
}

// A basis carried by name: onto its own problem it is the basis itself (no iteration to
// the optimum); onto a problem with other variables and rows, some renamed or left out,
// it is a start of the right count, and the solve proves the cold solve's optimum.
func TestCarriedBasis(t *testing.T) {
	var last Stats
	defer Trace(func(_ *Problem, st Stats) { last = st })()
	tried := 0
	for seed := range uint64(16) {
		a := randomAlpa(8+int(seed%3), 3, 300+seed)
		first := loose(t, a)
		if first.Basis == nil {
			continue
		}
		tried++
		budget := a.budget
		a.budget = 0
		for _, m := range a.mem {
			a.budget += maxOf(m)
		}
		p, _ := a.problem()
		a.budget = budget
		nameAll(p)
		nb := p.Named(first.Basis)
		require.NotNil(t, nb)
		assert.Equal(t, first.Basis, nb.For(p), "seed %d: carried onto its own problem", seed)
		_, _, err := solve(context.Background(), p, Options{Start: nb.For(p)})
		require.NoError(t, err)
		assert.Zero(t, last.Iterations, "seed %d: the start is the problem's own optimal basis", seed)

		for _, drop := range []bool{false, true} {
			q := shifted(p, drop)
			b := nb.For(q)
			basic := 0
			for _, ss := range [][]BasisStatus{b.Vars, b.Rows} {
				for _, s := range ss {
					if s == Basic {
						basic++
					}
				}
			}
			assert.Equal(t, len(q.Rows), basic, "seed %d drop %v: one basic entry a row", seed, drop)
			assert.Equal(t, AtLower, b.Vars[0], "seed %d: a name the basis lacks starts cold", seed)
			assert.Equal(t, Basic, b.Rows[0], "seed %d: a row the basis lacks starts with its slack basic", seed)
			cold, err := Solve(context.Background(), q, Options{})
			require.NoError(t, err)
			sol, err := Solve(context.Background(), q, Options{Start: b})
			require.NoError(t, err, "seed %d drop %v", seed, drop)
			assert.Equal(t, Optimal, sol.Status)
			requireSolutionChecks(t, q, sol)
			assert.InDelta(t, cold.Objective, sol.Objective, 1e-6, "seed %d drop %v", seed, drop)
		}
	}
	t.Logf("%d problems with a basis", tried)
	assert.Greater(t, tried, 3, "too few seeds had an integral root to carry")
}

// Names used twice, or no name at all, are not carried: those entries start cold.
func TestCarriedBasisSkipsAmbiguousNames(t *testing.T) {
	p := &Problem{}
	x := p.AddContinuous("x", 0, 10)
	y := p.AddContinuous("x", 0, 10)
	z := p.AddContinuous("", 0, 10)
	p.AddRow("r", []Term{{x, 1}, {y, 1}, {z, 1}}, GE, 1)
	b := &Basis{Vars: []BasisStatus{Basic, AtUpper, AtUpper}, Rows: []BasisStatus{AtLower}}
	got := p.Named(b).For(p)
	assert.Equal(t, []BasisStatus{AtLower, AtLower, AtLower}, got.Vars)
	assert.Equal(t, []BasisStatus{Basic}, got.Rows, "the count is mended with the row's slack")
	assert.Nil(t, p.Named(&Basis{}), "a basis of another size is not p's")
}
