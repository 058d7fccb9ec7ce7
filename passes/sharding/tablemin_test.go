package sharding

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// tableMinPlain is tableMin as it was before the row minima and the skipping of +∞ terms
// (f15c01b): every row summed afresh, every row scanned. TestTableMinSameBits holds the
// fast one to it bit for bit.
func tableMinPlain(fa *mpFactor, best [][]float64, j int, mine []float64) {
	if len(fa.vars) == 2 {
		nr, nc := fa.dims[0], fa.dims[1]
		for r := range nr {
			br := best[0][r]
			row := fa.cost[r*nc : r*nc+nc]
			if j == 0 {
				m := math.Inf(1)
				for c, x := range row {
					m = min(m, x+best[1][c])
				}
				mine[r] = min(mine[r], m+br)
				continue
			}
			for c, x := range row {
				mine[c] = min(mine[c], x+br)
			}
		}
		return
	}
	last := len(fa.vars) - 1
	nl, bl := fa.dims[last], best[last]
	var idx [mpMaxArity]int
	for base := 0; base < len(fa.cost); base += nl {
		pre := 0.0
		for i := range last {
			pre += best[i][idx[i]]
		}
		row := fa.cost[base : base+nl]
		if j == last {
			for c, x := range row {
				mine[c] = min(mine[c], x+pre+bl[c])
			}
		} else {
			m := math.Inf(1)
			for c, x := range row {
				m = min(m, x+bl[c])
			}
			mine[idx[j]] = min(mine[idx[j]], m+pre)
		}
		for i := last - 1; i >= 0; i-- {
			if idx[i]++; idx[i] < fa.dims[i] {
				break
			}
			idx[i] = 0
		}
	}
}

// randomTable is a table of n members with 1–4 classes each and costs of a few
// magnitudes (so that sums round differently in different orders).
func randomTable(r *rand.Rand, n int) mpFactor {
	f := mpFactor{}
	size := 1
	for i := range n {
		d := 1 + r.IntN(4)
		f.vars = append(f.vars, i)
		f.dims = append(f.dims, d)
		size *= d
	}
	f.cost = make([]float64, size)
	for i := range f.cost {
		f.cost[i] = r.Float64() * math.Pow(10, float64(r.IntN(7)-3))
	}
	return f
}

// randomBest is tableMin's best for member j of f: zeros for j; for the others −messages
// of mixed magnitudes and signs (zeros among them, whose negation is −0), with, when
// held, one finite class and the others +∞ (decode's fixed members).
func randomBest(r *rand.Rand, f *mpFactor, j int, held bool) [][]float64 {
	best := make([][]float64, len(f.vars))
	for i, d := range f.dims {
		b := make([]float64, d)
		if i != j {
			keep := r.IntN(d)
			for c := range b {
				switch {
				case held && r.IntN(2) == 0 && c != keep:
					b[c] = math.Inf(1)
				case r.IntN(5) == 0:
					b[c] = math.Copysign(0, -1) // −msg of a zero message
				default:
					b[c] = (r.Float64() - 0.5) * math.Pow(10, float64(r.IntN(7)-3))
				}
			}
		}
		best[i] = b
	}
	return best
}

// TestTableMinSameBits: on random tables of 1 to 6 members, with and without +∞ terms (held
// members) and with and without the row minima, tableMin writes the very bits
// tableMinPlain writes. Sum a row's terms in another order (last member first) or skip
// a row with a large finite term, and it fails.
func TestTableMinSameBits(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 13))
	for trial := range 3000 {
		f := randomTable(r, 1+r.IntN(6))
		j := r.IntN(len(f.vars))
		best := randomBest(r, &f, j, trial%2 == 1)
		want := make([]float64, f.dims[j])
		got := make([]float64, f.dims[j])
		for c := range want {
			want[c], got[c] = math.Inf(1), math.Inf(1)
		}
		tableMinPlain(&f, best, j, want)
		var rows []float64
		last := len(f.vars) - 1
		if last >= 2 && j != last && r.IntN(2) == 0 {
			rows = make([]float64, len(f.cost)/f.dims[last])
			tableMinRows(&f, best[last], rows)
		}
		tableMin(&f, best, j, got, rows)
		for c := range want {
			require.Equal(t, math.Float64bits(want[c]), math.Float64bits(got[c]),
				"trial %d: dims %v, member %d, class %d: %v, want %v", trial, f.dims, j, c, got[c], want[c])
		}
	}
}

// TestRowMinimaFollowMessages: while the solver runs on random energies with tables (as
// energyModel merges shared values' or-factors), after every sweep each table's row minima
// marked valid are those of its messages as they stand, and a solver that never keeps them
// nor the class minima (noRowMin) ends with the same messages, bound and labeling,
// bit for bit. Drop both pass's clear of rowOK and its wrote calls and it fails (either
// alone keeps the minima right while a table's members are in order, as addShared sorts
// them); so it does without the clearing of clsOK.
func TestRowMinimaFollowMessages(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 31))
	tables := 0
	for trial := range 60 {
		m := randomEnergy(r, 4+r.IntN(5), 6, 3+r.IntN(6), true)
		for _, f := range m.factors {
			if !f.or && len(f.vars) > 2 {
				tables++
			}
		}
		kept, fresh := newMPSolver(m), newMPSolver(m)
		fresh.noRowMin = true
		for it := range 8 {
			name := fmt.Sprintf("trial %d, sweep %d", trial, it)
			kept.pass(true)
			kept.pass(false)
			fresh.pass(true)
			fresh.pass(false)
			for f := range m.factors {
				fa := &m.factors[f]
				if kept.rowOK[f] {
					last := len(fa.vars) - 1
					bl := make([]float64, fa.dims[last])
					for c := range bl {
						bl[c] = math.Inf(1)
					}
					for x, c := range fa.classOf[last] {
						bl[c] = min(bl[c], -kept.msg[f][last][x])
					}
					rows := make([]float64, len(kept.rowMin[f]))
					tableMinRows(fa, bl, rows)
					require.Equal(t, rows, kept.rowMin[f], name)
				}
				for i := range fa.vars {
					for x := range kept.msg[f][i] {
						require.Equal(t, math.Float64bits(fresh.msg[f][i][x]), math.Float64bits(kept.msg[f][i][x]), name)
					}
				}
			}
			require.Equal(t, math.Float64bits(fresh.bound()), math.Float64bits(kept.bound()), name)
			require.Equal(t, fresh.decode(), kept.decode(), name)
		}
	}
	require.Greater(t, tables, 20, "the energies have tables of three or more members")
}

// TestTableCostsSameBits: the tables addShared makes of random or-factors and pair tables
// hold, cell for cell and bit for bit, the sum over their parts of each part's value at the
// cell's first labels, added in the parts' order (table's arithmetic before tableParts).
// Pair tables come both ways round (the last member first or second). Read an or-factor's
// category of the wrong member, keep a part's value past a change of a member's class
// (fillTable's changed one level too deep), or drop a table's stride of the last member,
// and it fails.
func TestTableCostsSameBits(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 5))
	tables := 0
	for range 200 {
		m := randomEnergy(r, 4+r.IntN(5), 6, 2+r.IntN(5), false)
		for i := range m.factors {
			if f := &m.factors[i]; !f.or && r.IntN(2) == 0 {
				transposePair(f) // the producer's variable after the consumer's, as energyModel may make them
			}
		}
		var ors []mpFactor
		var vars []int
		for _, f := range m.factors {
			if f.or {
				ors = append(ors, f)
				for _, v := range f.vars {
					if !slices.Contains(vars, v) {
						vars = append(vars, v)
					}
				}
			}
		}
		if len(ors) == 0 {
			continue
		}
		slices.Sort(vars)
		var pairs []int
		for i, f := range m.factors {
			if !f.or && slices.Contains(vars, f.vars[0]) && slices.Contains(vars, f.vars[1]) {
				pairs = append(pairs, i)
			}
		}
		tab, ok := m.table(vars, ors, pairs)
		if !ok {
			continue
		}
		tables++
		parts := slices.Clone(ors)
		for _, i := range pairs {
			parts = append(parts, m.factors[i])
		}
		x := make([]int, len(m.labels))
		idx := make([]int, len(vars))
		for cell, got := range tab.cost {
			for i, v := range vars {
				x[v] = slices.Index(tab.classOf[i], idx[i]) // the class's first label
			}
			want := 0.0
			for i := range parts {
				want += parts[i].value(x)
			}
			require.Equal(t, math.Float64bits(want), math.Float64bits(got), "cell %d", cell)
			for i := len(idx) - 1; i >= 0; i-- {
				if idx[i]++; idx[i] < tab.dims[i] {
					break
				}
				idx[i] = 0
			}
		}
	}
	require.Greater(t, tables, 100)
}

// transposePair swaps a pair table's members, the same costs.
func transposePair(f *mpFactor) {
	nr, nc := f.dims[0], f.dims[1]
	cost := make([]float64, len(f.cost))
	for a := range nr {
		for b := range nc {
			cost[b*nr+a] = f.cost[a*nc+b]
		}
	}
	f.vars = []int{f.vars[1], f.vars[0]}
	f.classOf = [][]int{f.classOf[1], f.classOf[0]}
	f.dims, f.cost = []int{nc, nr}, cost
}

// BenchmarkTableMin times one sweep's worth of min-marginals of a table of eight members of
// 2–4 classes (a shared value's table as addShared makes them, a few thousand cells), for
// every member in turn, as pass asks for them: tableMinPlain (before), tableMin with the
// row minima computed once per sweep (rows), and decode's, every member but the last held
// (held):
//
//	go test ./passes/sharding -run '^$' -bench TableMin
func BenchmarkTableMin(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	f := mpFactor{}
	size := 1
	for i := range 8 {
		d := 2 + r.IntN(3)
		f.vars, f.dims, size = append(f.vars, i), append(f.dims, d), size*d
	}
	f.cost = make([]float64, size)
	for i := range f.cost {
		f.cost[i] = r.Float64()
	}
	last := len(f.vars) - 1
	bests := make([][][]float64, len(f.vars))
	held := make([][][]float64, len(f.vars))
	for j := range f.vars {
		bests[j] = randomBest(r, &f, j, false)
		held[j] = randomBest(r, &f, j, false)
		for i := range j { // decode holds the members before j at one class
			for c := range held[j][i] {
				if c != 0 {
					held[j][i][c] = math.Inf(1)
				}
			}
		}
	}
	mine := make([]float64, 4)
	rows := make([]float64, size/f.dims[last])
	reset := func(n int) []float64 {
		m := mine[:n]
		for c := range m {
			m[c] = math.Inf(1)
		}
		return m
	}
	b.Run(fmt.Sprintf("plain/%d-cells", size), func(b *testing.B) {
		for b.Loop() {
			for j := range f.vars {
				tableMinPlain(&f, bests[j], j, reset(f.dims[j]))
			}
		}
	})
	b.Run(fmt.Sprintf("rows/%d-cells", size), func(b *testing.B) {
		for b.Loop() {
			tableMinRows(&f, bests[0][last], rows)
			for j := range f.vars {
				rm := rows
				if j == last {
					rm = nil
				}
				tableMin(&f, bests[j], j, reset(f.dims[j]), rm)
			}
		}
	})
	b.Run(fmt.Sprintf("held-plain/%d-cells", size), func(b *testing.B) {
		for b.Loop() {
			for j := range f.vars {
				tableMinPlain(&f, held[j], j, reset(f.dims[j]))
			}
		}
	})
	b.Run(fmt.Sprintf("held/%d-cells", size), func(b *testing.B) {
		for b.Loop() {
			for j := range f.vars {
				tableMin(&f, held[j], j, reset(f.dims[j]), nil)
			}
		}
	})
}

// icmPlain is icm as it was (every factor's value walked for every label).
func (m *mpModel) icmPlain(x []int, adj [][]mpRef, rounds int) {
	for range rounds {
		changed := false
		for v := range x {
			cur := x[v]
			best, bestE := cur, math.Inf(1)
			for k := range m.labels[v] {
				x[v] = k
				e := m.unary[v][k]
				for _, r := range adj[v] {
					e += m.factors[r.f].value(x)
				}
				if e < bestE || e == bestE && k == cur {
					best, bestE = k, e
				}
			}
			x[v] = best
			changed = changed || best != cur
		}
		if !changed {
			return
		}
	}
}

// TestICMSameLabels: from random labelings of random energies (pairs, or-factors, tables),
// icm ends where icmPlain ends. Give cellWithout the stride of the member after i and it
// fails.
func TestICMSameLabels(t *testing.T) {
	r := rand.New(rand.NewPCG(17, 4))
	for trial := range 300 {
		m := randomEnergy(r, 4+r.IntN(6), 6, r.IntN(6), trial%2 == 0)
		s := newMPSolver(m)
		x := make([]int, len(m.labels))
		for v := range x {
			x[v] = r.IntN(m.labels[v])
		}
		y := slices.Clone(x)
		m.icm(x, s.adj, 4)
		m.icmPlain(y, s.adj, 4)
		require.Equal(t, y, x, "trial %d", trial)
	}
}
