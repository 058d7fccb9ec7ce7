package sharding

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

func bruteMin(m *mpModel) float64 {
	x := make([]int, len(m.labels))
	best := 1e300
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

func randPairModel(r *rand.Rand, n, L int, tree bool, ors int) *mpModel {
	m := &mpModel{}
	for range n {
		u := make([]float64, L)
		for k := range u {
			u[k] = float64(r.IntN(10))
		}
		m.labels, m.unary = append(m.labels, L), append(m.unary, u)
	}
	ident := make([]int, L)
	for k := range ident {
		ident[k] = k
	}
	for v := 1; v < n; v++ {
		a := r.IntN(v)
		if !tree {
			a = r.IntN(n)
			if a == v {
				continue
			}
		}
		cost := make([]float64, L*L)
		for i := range cost {
			cost[i] = float64(r.IntN(10))
		}
		m.factors = append(m.factors, pairFactor(min(a, v), max(a, v), ident, ident, L, cost))
	}
	for range ors {
		vs := r.Perm(n)[:3]
		f := mpFactor{vars: vs, or: true, c: float64(r.IntN(10))}
		for range vs {
			cat := make([]uint8, L)
			for k := range cat {
				cat[k] = uint8(r.IntN(3))
			}
			f.cat = append(f.cat, cat)
		}
		m.factors = append(m.factors, f)
	}
	return m
}

func TestMPTreeExplore(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 10 {
		m := randPairModel(r, 7, 4, i%2 == 0, 0)
		res := solveMP(m, 500, 500)
		fmt.Println(i, "tree", i%2 == 0, "brute", bruteMin(m), "ub", res.ub, "lb", res.lb, res.closed, res.iters)
	}
	for i := range 10 {
		m := randPairModel(r, 7, 4, true, 2)
		res := solveMP(m, 500, 500)
		fmt.Println(i, "or", "brute", bruteMin(m), "ub", res.ub, "lb", res.lb, res.closed, res.iters)
	}
}
