package sharding

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/frontend"
	"github.com/autopar/autopar/frontend/zoo"
	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/passes"
)

func analysisGraphs(t *testing.T) map[string]*ir.Graph {
	out := map[string]*ir.Graph{}
	for _, name := range []string{"gpt-tiny", "moe-tiny", "wresnet-tiny"} {
		g, err := frontend.ParseFile("../../testdata/models/" + name + ".ir")
		require.NoError(t, err)
		g, err = passes.TrainingStep(g, passes.Optimizer{Kind: "sgd", LR: 0.01})
		require.NoError(t, err)
		out[name] = g
	}
	m, err := zoo.NewPreset("gpt-1.3b")
	require.NoError(t, err)
	m.(*zoo.GPT).Layers = 1
	g, err := m.Build()
	require.NoError(t, err)
	out["gpt-1.3b-layer"] = benchStep(t, g)
	return out
}

// reduce rows of cost modulo shift; returns number of distinct rows.
func distinctShift(cost [][]float64, rowsDim bool) int {
	nr, nc := len(cost), len(cost[0])
	get := func(i, j int) float64 {
		if rowsDim {
			return cost[i][j]
		}
		return cost[j][i]
	}
	n, m := nr, nc
	if !rowsDim {
		n, m = nc, nr
	}
	seen := map[string]bool{}
	for i := range n {
		s := ""
		for j := range m {
			s += fmt.Sprintf("%.17g,", get(i, j)-get(i, 0))
		}
		seen[s] = true
	}
	return len(seen)
}

func TestZZAnalysis(t *testing.T) {
	for name, g := range analysisGraphs(t) {
		if name != "gpt-1.3b-layer" {
			//continue
		}
		c, lm := benchMesh(t, "p3.16xlarge", 2, 2)
		p, err := newPlanner(g, lm, Options{Cluster: c})
		require.NoError(t, err)
		cells, cellsAfter, pairs, foldable := 0, 0, 0, 0
		hist := map[string]int{}
		for _, e := range p.edgeRecs {
			// recompute cost from objective
			nr, nc := len(e.vars), len(e.vars[0])
			cost := make([][]float64, nr)
			obj := map[int]float64{}
			for _, t := range p.prob.Objective {
				obj[int(t.Var)] = t.Coef
			}
			for r := range nr {
				cost[r] = make([]float64, nc)
				for cc := range nc {
					cost[r][cc] = obj[int(e.vars[r][cc])]
				}
			}
			pairs++
			cells += nr * nc
			dr, dc := distinctShift(cost, true), distinctShift(cost, false)
			if dr == 1 || dc == 1 {
				foldable++
			}
			cellsAfter += dr * dc
			hist[fmt.Sprintf("%dx%d->%dx%d", nr, nc, dr, dc)]++
		}
		singles := 0
		for gi := range p.groups {
			if p.rep[gi] == gi && len(p.groups[gi].strats) == 1 {
				singles++
			}
		}
		t.Logf("%s: vars %d rows %d edgevars %d; pairs %d cells %d -> %d (approx) foldable %d; ys %d; singles %d", name, p.prob.NumVars(), p.prob.NumRows(), p.edgeVars, pairs, cells, cellsAfter, foldable, len(p.sharedRecs), singles)
		if name == "gpt-1.3b-layer" {
			t.Logf("%v", hist)
		}
	}
}

func TestZZMatrices(t *testing.T) {
	gs := analysisGraphs(t)
	for _, name := range []string{"gpt-1.3b-layer", "gpt-tiny", "moe-tiny", "wresnet-tiny"} {
		g := gs[name]
		c, lm := benchMesh(t, "p3.16xlarge", 2, 2)
		p, err := newPlanner(g, lm, Options{Cluster: c})
		require.NoError(t, err)
		shared := p.sharedValues()
		cells, dcells, printed := 0, 0, 0
		for _, es := range p.pairs(shared) {
			pc, ok := p.pairCost(es)
			if !ok {
				continue
			}
			nr, nc := len(pc.cost), len(pc.cost[0])
			cells += nr * nc
			// u_r = row max, v = 0; or v_c = col max, u = 0: count cells with d != 0
			best := nr * nc
			for _, mode := range []int{0, 1} {
				n := 0
				for r := range nr {
					for cc := range nc {
						var m float64
						if mode == 0 {
							for k := range nc {
								m = max(m, pc.cost[r][k])
							}
						} else {
							for k := range nr {
								m = max(m, pc.cost[k][cc])
							}
						}
						if pc.cost[r][cc] != m {
							n++
						}
					}
				}
				best = min(best, n)
			}
			dcells += best
			if printed < 2 && nr >= 16 && nc >= 16 && name == "gpt-1.3b-layer" {
				printed++
				t.Logf("pair %s -> %s (%d edges)", p.g.Value(es[0].from).Name, p.g.Value(es[0].to).Name, len(es))
				for r := range nr {
					s := ""
					for cc := range nc {
						s += fmt.Sprintf("%7.2g", pc.cost[r][cc]*1e6)
					}
					t.Log(s)
				}
			}
		}
		t.Logf("%s: todo cells %d, sparse-bonus cells %d", name, cells, dcells)
	}
}

// iterated merge of rows/cols equal modulo shift
var shiftR = 0.0

func mergedSize(cost [][]float64) (int, int) {
	rows := make([][]float64, len(cost))
	copy(rows, cost)
	for {
		nr0, nc0 := len(rows), len(rows[0])
		// merge rows
		seen := map[string]bool{}
		var nrows [][]float64
		for _, r := range rows {
			k := ""
			for j := range r {
				k += fmt.Sprintf("%x,", r[j]-shiftR*r[0])
			}
			if !seen[k] {
				seen[k] = true
				nrows = append(nrows, r)
			}
		}
		rows = nrows
		// merge cols
		seen = map[string]bool{}
		var keep []int
		for j := range rows[0] {
			k := ""
			for i := range rows {
				k += fmt.Sprintf("%x,", rows[i][j]-shiftR*rows[0][j])
			}
			if !seen[k] {
				seen[k] = true
				keep = append(keep, j)
			}
		}
		for i := range rows {
			var r []float64
			for _, j := range keep {
				r = append(r, rows[i][j])
			}
			rows[i] = r
		}
		if len(rows) == nr0 && len(rows[0]) == nc0 {
			return nr0, nc0
		}
	}
}

func TestZZMerge(t *testing.T) {
	gs := analysisGraphs(t)
	for _, name := range []string{"gpt-1.3b-layer", "gpt-tiny", "moe-tiny", "wresnet-tiny"} {
		g := gs[name]
		c, lm := benchMesh(t, "p3.16xlarge", 2, 2)
		p, err := newPlanner(g, lm, Options{Cluster: c})
		require.NoError(t, err)
		shared := p.sharedValues()
		cells, after, rowsBefore, rowsAfter, folds, npairs := 0, 0, 0, 0, 0, 0
		for _, es := range p.pairs(shared) {
			pc, ok := p.pairCost(es)
			if !ok {
				continue
			}
			npairs++
			nr, nc := len(pc.cost), len(pc.cost[0])
			cells += nr * nc
			rowsBefore += nr + nc
			mr, mc := mergedSize(pc.cost)
			if mr == 1 || mc == 1 {
				folds++
			} else {
				after += mr * mc
				rowsAfter += mr + mc
			}
		}
		nOne, nPair, nY, nOther := 0, 0, 0, 0
		for _, r := range p.prob.Rows {
			switch {
			case len(r.Name) > 7 && r.Name[:7] == "onehot.":
				nOne++
			case r.Name[:2] == "e.":
				nPair++
			case r.Name[:2] == "y.":
				nY++
			default:
				nOther++
			}
		}
		nS, nE, nYv := 0, 0, 0
		for _, v := range p.prob.Vars {
			switch v.Name[:2] {
			case "s.":
				nS++
			case "e.":
				nE++
			case "y.":
				nYv++
			}
		}
		t.Logf("%s: todo pairs %d cells %d -> %d, pair rows %d -> %d, folds %d | rows: onehot %d pair %d y %d other %d | vars s %d e %d y %d (addShared edges e %d)", name, npairs, cells, after, rowsBefore, rowsAfter, folds, nOne, nPair, nY, nOther, nS, nE, nYv, nE-cells)
	}
}
