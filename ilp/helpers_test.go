package ilp

import (
	"math"
	"math/rand/v2"
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that Solve's context watcher never outlives a solve.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0x5eed)) }

// hardSubsetSum is a subset-sum knapsack (values = weights, large random
// weights, capacity half the total): its LP bound stays fractional-tight at
// every node, so branch and bound cannot prove optimality of n = 60 items in
// any reasonable time, while it finds feasible points at once.
func hardSubsetSum(n int, seed uint64) *Problem {
	r := newRand(seed)
	var p Problem
	row := make([]Term, n)
	obj := make([]Term, n)
	sum := 0.0
	for i := range n {
		a := float64(100000 + r.IntN(900000))
		v := p.AddBinary("")
		row[i], obj[i] = Term{v, a}, Term{v, -a}
		sum += a
	}
	p.SetObjective(obj, 0)
	p.AddRow("cap", row, LE, math.Floor(sum/2)+0.5)
	return &p
}

// alpaInstance is the intra-operator pass's ILP in miniature: nodes choose
// one of k strategies (one-hot binaries s), every edge u→v carries k×k
// continuous vars e with row sums = s_u and column sums = s_v, the objective
// is Σ s·c + Σ e·R, and one memory row bounds Σ s·mem.
type alpaInstance struct {
	k        int
	nodeCost [][]float64   // [node][strategy]
	mem      [][]float64   // [node][strategy]
	edges    [][2]int      // u, v
	edgeCost [][][]float64 // [edge][su][sv]
	budget   float64
}

// randomAlpa makes a chain of n nodes plus a skip edge every 3 nodes (like
// residual connections), with random costs and a memory budget that rules
// out the cheapest-memory-agnostic choices sometimes.
func randomAlpa(n, k int, seed uint64) *alpaInstance {
	r := newRand(seed)
	a := &alpaInstance{k: k}
	minMem, maxMem := 0.0, 0.0
	for range n {
		c, m := make([]float64, k), make([]float64, k)
		for s := range k {
			c[s], m[s] = float64(r.IntN(100)), float64(1+r.IntN(20))
		}
		a.nodeCost, a.mem = append(a.nodeCost, c), append(a.mem, m)
		minMem, maxMem = minMem+minOf(m), maxMem+maxOf(m)
	}
	for v := 1; v < n; v++ {
		a.edges = append(a.edges, [2]int{v - 1, v})
		if v%3 == 0 && v >= 3 {
			a.edges = append(a.edges, [2]int{v - 3, v})
		}
	}
	for range a.edges {
		rc := make([][]float64, k)
		for su := range k {
			rc[su] = make([]float64, k)
			for sv := range k {
				if su != sv {
					rc[su][sv] = float64(r.IntN(60))
				}
			}
		}
		a.edgeCost = append(a.edgeCost, rc)
	}
	a.budget = minMem + (maxMem-minMem)*0.4
	return a
}

func minOf(xs []float64) float64 {
	m := math.Inf(1)
	for _, x := range xs {
		m = math.Min(m, x)
	}
	return m
}

func maxOf(xs []float64) float64 {
	m := math.Inf(-1)
	for _, x := range xs {
		m = math.Max(m, x)
	}
	return m
}

// problem builds the ILP and returns it with s[node][strategy].
func (a *alpaInstance) problem() (*Problem, [][]VarID) {
	var p Problem
	var obj, memRow []Term
	s := make([][]VarID, len(a.nodeCost))
	for v := range s {
		onehot := make([]Term, a.k)
		for st := range a.k {
			s[v] = append(s[v], p.AddBinary(""))
			onehot[st] = Term{s[v][st], 1}
			obj = append(obj, Term{s[v][st], a.nodeCost[v][st]})
			memRow = append(memRow, Term{s[v][st], a.mem[v][st]})
		}
		p.AddRow("", onehot, EQ, 1)
	}
	for i, ed := range a.edges {
		obj = a.addEdge(&p, obj, s[ed[0]], s[ed[1]], a.edgeCost[i])
	}
	p.AddRow("mem", memRow, LE, a.budget)
	p.SetObjective(obj, 0)
	return &p, s
}

// addEdge adds the k×k edge vars with their row and column sums.
func (a *alpaInstance) addEdge(p *Problem, obj []Term, su, sv []VarID, cost [][]float64) []Term {
	e := make([][]VarID, a.k)
	for i := range a.k {
		for j := range a.k {
			e[i] = append(e[i], p.AddContinuous("", 0, 1))
			obj = append(obj, Term{e[i][j], cost[i][j]})
		}
	}
	for i := range a.k {
		row, col := []Term{{su[i], -1}}, []Term{{sv[i], -1}}
		for j := range a.k {
			row = append(row, Term{e[i][j], 1})
			col = append(col, Term{e[j][i], 1})
		}
		p.AddRow("", row, EQ, 0)
		p.AddRow("", col, EQ, 0)
	}
	return obj
}

// cost returns the objective of a choice, and whether it fits the budget.
func (a *alpaInstance) cost(choice []int) (float64, bool) {
	c, m := 0.0, 0.0
	for v, st := range choice {
		c, m = c+a.nodeCost[v][st], m+a.mem[v][st]
	}
	for i, ed := range a.edges {
		c += a.edgeCost[i][choice[ed[0]]][choice[ed[1]]]
	}
	return c, m <= a.budget
}

// bruteForce returns the best feasible cost over all k^n choices.
func (a *alpaInstance) bruteForce() float64 {
	best := math.Inf(1)
	choice := make([]int, len(a.nodeCost))
	var rec func(v int)
	rec = func(v int) {
		if v == len(choice) {
			if c, ok := a.cost(choice); ok {
				best = math.Min(best, c)
			}
			return
		}
		for st := range a.k {
			choice[v] = st
			rec(v + 1)
		}
	}
	rec(0)
	return best
}

// permutations calls f with every permutation of 0..n-1.
func permutations(n int, f func([]int)) {
	perm := make([]int, n)
	used := make([]bool, n)
	var rec func(i int)
	rec = func(i int) {
		if i == n {
			f(perm)
			return
		}
		for j := range n {
			if !used[j] {
				used[j], perm[i] = true, j
				rec(i + 1)
				used[j] = false
			}
		}
	}
	rec(0)
}

// requireSolutionChecks verifies a solution with Evaluate, the independent
// checker.
func requireSolutionChecks(t *testing.T, p *Problem, sol *Solution) {
	t.Helper()
	ev := Evaluate(p, sol.Values)
	if err := ev.Err(); err != nil {
		t.Fatalf("solver's solution fails Evaluate: %v", err)
	}
	if math.Abs(ev.Objective-sol.Objective) > 1e-9*math.Max(1, math.Abs(ev.Objective)) {
		t.Fatalf("Evaluate objective %g, Solution.Objective %g", ev.Objective, sol.Objective)
	}
}

// choiceOf reads the strategy each node's one-hot variables s[v] chose in sol.
func choiceOf(sol *Solution, s [][]VarID) []int {
	choice := make([]int, len(s))
	for v := range s {
		for st, id := range s[v] {
			if sol.Value(id) == 1 {
				choice[v] = st
			}
		}
	}
	return choice
}

// randomKnapsack draws a 0/1 knapsack of n items (values 1–50, weights 1–25) as a
// minimisation ILP, with its items for knapsackDP.
func randomKnapsack(r *rand.Rand, n, capacity int) (p *Problem, values, weights []int, _ int) {
	p = &Problem{}
	values, weights = make([]int, n), make([]int, n)
	var row, obj []Term
	for i := range n {
		values[i], weights[i] = 1+r.IntN(50), 1+r.IntN(25)
		v := p.AddBinary("")
		row, obj = append(row, Term{v, float64(weights[i])}), append(obj, Term{v, -float64(values[i])})
	}
	p.AddRow("capacity", row, LE, float64(capacity))
	p.SetObjective(obj, 0)
	return p, values, weights, capacity
}
