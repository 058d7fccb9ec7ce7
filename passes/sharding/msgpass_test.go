package sharding

import (
	"context"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/ilp"
	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/mesh"
)

// bruteMin is min E over every labeling of m.
func bruteMin(m *mpModel) float64 {
	x := make([]int, len(m.labels))
	best := math.Inf(1)
	var rec func(v int)
	rec = func(v int) {
		if v == len(x) {
			best = min(best, m.energy(x))
			return
		}
		for k := range m.labels[v] {
			x[v] = k
			rec(v + 1)
		}
	}
	rec(0)
	return best
}

// randomEnergy draws n variables of up to L labels (classes of up to L/2 labels, as the
// planner's pairs have), pair tables on a tree and a few more closing cycles, and or-factors of
// arity 2 or 3 — either as they are or, with tables, merged per "value" by addShared as
// energyModel does — with small integer costs, so that ties abound.
func randomEnergy(r *rand.Rand, n, L int, ors int, tables bool) *mpModel {
	m := &mpModel{}
	for range n {
		k := 1 + r.IntN(L)
		u := make([]float64, k)
		for i := range u {
			u[i] = float64(r.IntN(6))
		}
		m.labels, m.unary = append(m.labels, k), append(m.unary, u)
	}
	classes := func(v int) ([]int, int) {
		nc := 1 + r.IntN(max(1, m.labels[v]/2))
		of := make([]int, m.labels[v])
		for i := range of {
			of[i] = i % nc
		}
		return of, nc
	}
	pair := func(a, v int) {
		rowOf, nr := classes(a)
		colOf, nc := classes(v)
		cost := make([]float64, nr*nc)
		for i := range cost {
			cost[i] = float64(r.IntN(6))
		}
		m.factors = append(m.factors, pairFactor(a, v, rowOf, colOf, nc, cost))
	}
	for v := 1; v < n; v++ {
		pair(r.IntN(v), v)
	}
	for range n {
		if a, v := r.IntN(n), r.IntN(n); a != v {
			pair(min(a, v), max(a, v))
		}
	}
	var group []mpFactor
	for i := range ors {
		vs := r.Perm(n)[:2+r.IntN(2)]
		f := mpFactor{or: true, c: float64(r.IntN(6))}
		for j, v := range vs {
			cat := make([]uint8, m.labels[v])
			for k := range cat {
				cat[k] = uint8(r.IntN(2))
				if j == 0 && r.IntN(3) == 0 {
					cat[k] = catKill // a producer out of the class
				}
			}
			f.vars, f.cat = append(f.vars, v), append(f.cat, cat)
		}
		sortFactor(&f)
		if !tables {
			m.factors = append(m.factors, f)
			continue
		}
		group = append(group, f)
		if i%2 == 1 || i == ors-1 {
			m.addShared(group)
			group = nil
		}
	}
	return m
}

// sortFactor orders an or-factor's members by variable, as orOf does.
func sortFactor(f *mpFactor) {
	for i := range f.vars {
		for j := i + 1; j < len(f.vars); j++ {
			if f.vars[j] < f.vars[i] {
				f.vars[i], f.vars[j] = f.vars[j], f.vars[i]
				f.cat[i], f.cat[j] = f.cat[j], f.cat[i]
			}
		}
	}
}

// TestCertificateNeverWrong: on random energies small enough to enumerate — pair tables
// over classes, or-factors, or-factors merged into tables, full of ties — the dual bound
// never exceeds the true minimum, and a closed certificate's labeling is a true minimum.
// Made to raise the bound by 1e-6 (mpBoundSlack), the test fails: it can catch a bound
// that is too high.
func TestCertificateNeverWrong(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 1))
	closed := 0
	const trials = 300
	for trial := range trials {
		m := randomEnergy(r, 3+r.IntN(4), 5, r.IntN(5), trial%2 == 0)
		best := bruteMin(m)
		res := solveMP(m, 200, 20, nil)
		name := fmt.Sprintf("trial %d", trial)
		require.False(t, math.IsNaN(res.lb), name)
		require.LessOrEqual(t, res.lb+mpBoundSlack, best+1e-9, name)
		require.GreaterOrEqual(t, res.ub, best-1e-9, name)
		assert.InDelta(t, m.energy(res.x), res.ub, 1e-9, name)
		if res.closed {
			closed++
			require.True(t, mpClosed(m.energy(res.x), best), "%s: certified %g, minimum %g", name, res.ub, best)
		}
	}
	// Not vacuous: most certificates close (their LP is tight).
	assert.Greater(t, closed, trials/2)
	t.Logf("%d of %d certificates closed", closed, trials)
}

// TestCertificateOpenOnAFrustratedCycle: three variables of two labels that must all differ
// pairwise (a cost of 1 on each equal pair) cannot all differ: the minimum is 1, but the
// local polytope's is 0 (every pair half equal, half not), so no dual bound rises above 0
// and the certificate must stay open; the labeling found is still a minimum.
func TestCertificateOpenOnAFrustratedCycle(t *testing.T) {
	m := &mpModel{labels: []int{2, 2, 2}, unary: [][]float64{{0, 0}, {0, 0}, {0, 0}}}
	ident := []int{0, 1}
	for _, e := range [][2]int{{0, 1}, {1, 2}, {0, 2}} {
		m.factors = append(m.factors, pairFactor(e[0], e[1], ident, ident, 2, []float64{1, 0, 0, 1}))
	}
	res := solveMP(m, 200, 20, nil)
	assert.False(t, res.closed)
	assert.LessOrEqual(t, res.lb, 1e-12)
	assert.Equal(t, 1.0, res.ub)
	assert.Equal(t, 1.0, bruteMin(m))
}

// mpBoundSlack is 0; the mutation check of TestCertificateNeverWrong sets it to 1e-6 by hand.
const mpBoundSlack = 0.0

// TestEnergyEqualsILP: on real planner ILPs (random graphs, the tiny zoo models' steps), the
// energy of random choices equals the ILP's objective at their assignment.
func TestEnergyEqualsILP(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	var ps []*planner
	for _, name := range []string{"gpt-tiny", "moe-tiny", "mlp-tiny"} {
		p, err := newPlanner(tinyStep(t, name), uniform(t, 2, 2), Options{DeviceFLOPS: 1e9})
		require.NoError(t, err)
		ps = append(ps, p)
	}
	for _, p := range ps {
		m, mv, err := p.energyModel()
		require.NoError(t, err)
		for range 50 {
			x := make([]int, len(m.labels))
			for v := range x {
				x[v] = rng.IntN(m.labels[v])
			}
			choice := make([]int, len(p.groups))
			for gi := range choice {
				choice[gi] = x[mv[gi]]
			}
			ev := ilp.Evaluate(p.prob, p.assignment(choice))
			require.NoError(t, ev.Err())
			require.InDelta(t, ev.Objective, m.energy(x), 1e-12*max(1, math.Abs(ev.Objective)), p.g.Name)
		}
	}
}

var certifyAll = flag.Bool("certify-all", false, "TestCertifiedEqualsLPSolve on every tiny model on 2×2 and 1×4 and on a GPT-1.3B layer (slow)")

// TestCertifiedEqualsLPSolve: on the tiny zoo models' steps (with -certify-all: on more
// meshes, and one GPT-1.3B layer) the plan's ILP objective equals lp_solve's to lp_solve's
// gaps, whichever answered; most are the certificate's, and the same solve twice gives
// the same plan.
func TestCertifiedEqualsLPSolve(t *testing.T) {
	type tc struct {
		name string
		g    *ir.Graph
		lm   *mesh.LogicalMesh
		opts Options
	}
	var cases []tc
	for _, c := range []struct {
		model  string
		n0, n1 int
	}{{"mlp-tiny", 2, 2}, {"moe-tiny", 1, 4}, {"gpt-tiny", 1, 4}, {"wresnet-tiny", 1, 4},
		{"mlp-tiny", 1, 4}, {"moe-tiny", 2, 2}, {"gpt-tiny", 2, 2}, {"wresnet-tiny", 2, 2}} {
		if len(cases) == 4 && !*certifyAll {
			break
		}
		// The cpu cluster's prices: on a uniform mesh at 1e9 FLOP/s the certificate of
		// moe-tiny and gpt-tiny on 1×4 stalls 8–11 % above its 1e-9 tolerance once the
		// ILP prices every read inside a group (docs/DECISIONS.md, "Round eleven, objcost").
		cl, lm := benchMesh(t, "cpu", c.n0, c.n1)
		cases = append(cases, tc{fmt.Sprintf("%s/%dx%d", c.model, c.n0, c.n1), tinyStep(t, c.model), lm, Options{Cluster: cl}})
	}
	if *certifyAll {
		c, lm := benchMesh(t, "dgx-a100", 2, 2)
		cases = append(cases, tc{"gpt-1.3b-layer/2x2", gptLayerStep(t), lm, Options{Cluster: c}})
	}
	answered := 0
	for _, c := range cases {
		mp, err := Solve(context.Background(), c.g, c.lm, c.opts)
		require.NoError(t, err, c.name)
		lpOpts := c.opts
		lpOpts.LPSolveOnly = true
		lp, err := Solve(context.Background(), c.g, c.lm, lpOpts)
		require.NoError(t, err, c.name)
		require.Equal(t, "lp_solve", lp.ILP.Solver)
		require.Equal(t, "optimal", mp.ILP.Status)
		tol := max(mpGapAbs, mpGapRel*math.Abs(lp.ILP.Objective)) + 1e-12*math.Abs(lp.ILP.Objective)
		require.InDelta(t, lp.ILP.Objective, mp.ILP.Objective, tol, c.name)
		if mp.ILP.Solver == "msgpass" {
			answered++
			again, err := Solve(context.Background(), c.g, c.lm, c.opts)
			require.NoError(t, err)
			require.Equal(t, mp.Specs, again.Specs, "%s: deterministic", c.name)
			require.Equal(t, mp.Choice, again.Choice)
		}
		t.Logf("%s: %s, objective %.12g (lp_solve %.12g), %d sweeps", c.name, mp.ILP.Solver, mp.ILP.Objective, lp.ILP.Objective, mp.ILP.Sweeps)
	}
	assert.GreaterOrEqual(t, answered, len(cases)/2, "the certificate answers most layer ILPs")
}

// TestLowerBoundIsLower: LowerBound never exceeds the objective Solve finds, with or
// without a memory budget that binds, and equals it when it says exact and none binds.
func TestLowerBoundIsLower(t *testing.T) {
	for _, name := range []string{"mlp-tiny", "moe-tiny"} {
		g, lm := tinyStep(t, name), uniform(t, 1, 4)
		opts := Options{DeviceFLOPS: 1e9, LPSolveOnly: true}
		free, err := Solve(context.Background(), g, lm, opts)
		require.NoError(t, err)
		lb, exact, err := LowerBound(context.Background(), g, lm, opts)
		require.NoError(t, err)
		require.LessOrEqual(t, lb, free.ILP.Objective, name)
		if exact {
			require.True(t, mpClosed(free.ILP.Objective, lb), "%s: exact bound %g, optimum %g", name, lb, free.ILP.Objective)
		}
		if name != "mlp-tiny" {
			continue
		}
		opts.MemoryBudget = free.PeakMemory * 9 / 10
		tight, err := Solve(context.Background(), g, lm, opts)
		require.NoError(t, err)
		require.Greater(t, tight.ILP.MemoryRows, 0, "the budget binds")
		require.LessOrEqual(t, lb, tight.ILP.Objective, name)
	}
}
