package sharding

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/frontend"
	"github.com/autopar/autopar/frontend/zoo"
	"github.com/autopar/autopar/ilp"
	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/mesh"
	"github.com/autopar/autopar/passes"
)

// The benchmarks time the whole pass — candidates, merging, tying, building the ILP,
// lp_solve and the result — and report the ILP's size. Run them with
//
//	go test ./passes/sharding -run '^$' -bench . -benchtime 1x

func benchMesh(b testing.TB, cluster string, n0, n1 int) (*mesh.Cluster, *mesh.LogicalMesh) {
	c, err := mesh.ParseCluster(cluster)
	require.NoError(b, err)
	sub := mesh.Submesh{Hosts: 1, Devices: n0 * n1}
	if n0*n1 > c.DevicesPerHost {
		sub = mesh.Submesh{Hosts: n0 * n1 / c.DevicesPerHost, Devices: c.DevicesPerHost}
	}
	lm, err := mesh.NewLogicalMesh(c, sub, n0, n1)
	require.NoError(b, err)
	return c, lm
}

// benchStep makes the SGD step of one micro-batch of 16 sequences, the unit the stage DP
// asks the pass about (a whole batch of 1024 does not fit any device).
func benchStep(b testing.TB, g *ir.Graph) *ir.Graph {
	g, err := passes.Rebatch(g, 16)
	require.NoError(b, err)
	g, err = passes.TrainingStep(g, passes.Optimizer{Kind: "sgd", LR: 0.01})
	require.NoError(b, err)
	return g
}

// gptLayerStep is benchStep of one layer of GPT-1.3B with its embedding and head.
func gptLayerStep(t testing.TB) *ir.Graph {
	m, err := zoo.NewPreset("gpt-1.3b")
	require.NoError(t, err)
	m.(*zoo.GPT).Layers = 1
	g, err := m.Build()
	require.NoError(t, err)
	return benchStep(t, g)
}

func loadModel(b *testing.B, name string) *ir.Graph {
	path := "../../testdata/models/" + name + ".ir"
	if _, err := os.Stat(path); err != nil {
		b.Skipf("%s is absent", path)
	}
	g, err := frontend.ParseFile(path)
	require.NoError(b, err)
	return benchStep(b, g)
}

func runSolve(b *testing.B, g *ir.Graph, c *mesh.Cluster, lm *mesh.LogicalMesh, once bool) {
	runSolveWith(b, g, lm, Options{Cluster: c, SolveLayersOnce: once}, false)
}

// runSolveWith solves g on lm under opts b.N times and reports the last ILP's size; with
// skipTimeout, a solve that finds no plan in lp_solve's time limit skips the benchmark
// instead of failing it.
func runSolveWith(b *testing.B, g *ir.Graph, lm *mesh.LogicalMesh, opts Options, skipTimeout bool) {
	var r *Result
	var mu sync.Mutex
	var lpCPU time.Duration
	var iters int64
	defer ilp.Trace(func(_ *ilp.Problem, st ilp.Stats) {
		mu.Lock()
		defer mu.Unlock()
		lpCPU += st.CPU
		iters += st.Iterations
	})()
	b.ResetTimer()
	for range b.N {
		var err error
		r, err = Solve(context.Background(), g, lm, opts)
		if skipTimeout && errors.Is(err, ilp.ErrTimeout) {
			b.Skipf("lp_solve found no plan in its time limit: %v", err)
		}
		require.NoError(b, err)
	}
	b.StopTimer()
	b.ReportMetric(float64(r.ILP.Variables), "vars")
	b.ReportMetric(float64(r.ILP.EdgeVars), "edge-vars")
	b.ReportMetric(float64(r.ILP.Rows), "rows")
	b.ReportMetric(float64(r.ILP.Nodes), "nodes")
	b.ReportMetric(r.ILP.SolveTime.Seconds(), "lp-s")
	b.ReportMetric(lpCPU.Seconds()/float64(b.N), "lp-cpu-s")
	b.ReportMetric(float64(iters)/float64(b.N), "iters")
	b.ReportMetric(r.Cost.Total*1e6, "step-µs")
}

// BenchmarkGPTLayer: one layer of GPT-1.3B (hidden 2048, 32 heads, seq 1024, batch 1024)
// with its embedding and head, on one host of dgx-a100, one micro-batch of 16.
func BenchmarkGPTLayer(b *testing.B) {
	g := gptLayerStep(b)
	for _, shape := range [][2]int{{2, 4}, {1, 8}} {
		b.Run(fmt.Sprintf("%dx%d", shape[0], shape[1]), func(b *testing.B) {
			c, lm := benchMesh(b, "dgx-a100", shape[0], shape[1])
			runSolve(b, g, c, lm, false)
		})
	}
}

// BenchmarkGPT13B: the GPT-1.3B training step (24 layers), identical layers solved once.
func BenchmarkGPT13B(b *testing.B) {
	g := loadModel(b, "gpt-1.3b")
	for _, shape := range [][2]int{{2, 4}, {1, 8}} {
		b.Run(fmt.Sprintf("%dx%d", shape[0], shape[1]), func(b *testing.B) {
			c, lm := benchMesh(b, "dgx-a100", shape[0], shape[1])
			runSolve(b, g, c, lm, true)
		})
	}
}

// BenchmarkGPT39B: the GPT-39B training step on 8 dgx-a100 hosts as an 8×8 mesh,
// identical layers solved once.
func BenchmarkGPT39B(b *testing.B) {
	g := loadModel(b, "gpt-39b")
	b.Run("8x8", func(b *testing.B) {
		c, lm := benchMesh(b, "dgx-a100:8", 8, 8)
		runSolve(b, g, c, lm, true)
	})
}

// BenchmarkILPSize reports the size of the sharding ILP (variables, edge variables, rows,
// nodes) and lp_solve's time for the zoo's tiny models (their whole SGD step, batch 8) and
// one GPT-1.3B layer (a micro-batch of 16) on the logical meshes of Alpa's p3.16xlarge
// host (8 V100s as 2×4, 4×2 and 1×8; 4 of them as 2×2), each twice: "full" is the ILP
// without the size reductions (Options.NoPrune, FullEinsums, FullConvs and no constant
// folding), "small" the default one (dominance.go, einsumcut.go, merge.go's fill). step-µs is the
// plan's predicted time, which the cut may change and nothing else does:
//
//	go test ./passes/sharding -run '^$' -bench ILPSize -benchtime 1x
func BenchmarkILPSize(b *testing.B) {
	type model struct {
		name string
		g    func(b *testing.B) *ir.Graph
	}
	tiny := func(name string) func(b *testing.B) *ir.Graph {
		return func(b *testing.B) *ir.Graph {
			g, err := frontend.ParseFile("../../testdata/models/" + name + ".ir")
			require.NoError(b, err)
			g, err = passes.TrainingStep(g, passes.Optimizer{Kind: "sgd", LR: 0.01})
			require.NoError(b, err)
			return g
		}
	}
	models := []model{
		{"gpt-tiny", tiny("gpt-tiny")},
		{"moe-tiny", tiny("moe-tiny")},
		{"wresnet-tiny", tiny("wresnet-tiny")},
		{"gpt-1.3b-layer", func(b *testing.B) *ir.Graph { return gptLayerStep(b) }},
	}
	for _, m := range models {
		b.Run(m.name, func(b *testing.B) {
			g := m.g(b)
			for _, shape := range [][2]int{{2, 4}, {4, 2}, {1, 8}, {2, 2}} {
				b.Run(fmt.Sprintf("%dx%d", shape[0], shape[1]), func(b *testing.B) {
					c, lm := benchMesh(b, "p3.16xlarge", shape[0], shape[1])
					b.Run("full", func(b *testing.B) {
						opts := full(Options{Cluster: c})
						opts.FullEinsums, opts.FullConvs = true, true
						runSolveWith(b, g, lm, opts, true)
					})
					b.Run("small", func(b *testing.B) { runSolveWith(b, g, lm, Options{Cluster: c}, true) })
				})
			}
		})
	}
}

// BenchmarkPlannerBuild times newPlanner alone — candidates, merging, cut, tying, pruning
// and building the ILP, no lp_solve — on one GPT-1.3B layer (a micro-batch of 16) and the
// tiny MoE's SGD step, on p3.16xlarge's 2×2 mesh. The resharding prices are memoized across
// the iterations (Options.Reshard, filled by one untimed build), as the search's solves on
// one mesh share them; the candidate-memo variants share the strategies too
// (Options.Candidates), as the search's solves of one stage graph do:
//
//	go test ./passes/sharding -run '^$' -bench PlannerBuild
func BenchmarkPlannerBuild(b *testing.B) {
	gpt := func(b *testing.B) *ir.Graph { return gptLayerStep(b) }
	for _, m := range []struct {
		name string
		g    func(b *testing.B) *ir.Graph
	}{{"gpt-1.3b-layer", gpt}, {"moe-tiny", func(b *testing.B) *ir.Graph { return tinyStep(b, "moe-tiny") }}} {
		for _, memo := range []bool{false, true} {
			name := m.name
			if memo {
				name += "/candidate-memo" // the strategies enumerated once (candmemo.go)
			}
			b.Run(name, func(b *testing.B) {
				g := m.g(b)
				c, lm := benchMesh(b, "p3.16xlarge", 2, 2)
				opts := Options{Cluster: c, Reshard: &ReshardMemo{}}
				if memo {
					opts.Candidates = &CandidateMemo{}
				}
				p, err := newPlanner(g, lm, opts)
				require.NoError(b, err)
				b.ReportAllocs()
				b.ResetTimer()
				cpu := cpuTime()
				for range b.N {
					p, err = newPlanner(g, lm, opts)
					require.NoError(b, err)
				}
				b.ReportMetric(float64((cpuTime()-cpu).Milliseconds())/float64(b.N), "cpu-ms/op")
				b.ReportMetric(float64(p.prob.NumVars()), "vars")
			})
		}
	}
}

// cpuTime is the process's user and system CPU time so far (the machine is shared: wall
// time says little).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkCertify times the message-passing certificate (certify.go: the energy model
// and its solve) against lp_solve on the same ILP, one GPT-1.3B layer on dgx-a100 meshes,
// the planner built outside the timer:
//
//	go test ./passes/sharding -run '^$' -bench Certify -benchtime 1x
func BenchmarkCertify(b *testing.B) {
	g := gptLayerStep(b)
	for _, shape := range [][2]int{{2, 2}, {2, 4}, {1, 4}, {4, 2}} {
		c, lm := benchMesh(b, "dgx-a100", shape[0], shape[1])
		p, err := newPlanner(g, lm, Options{Cluster: c})
		require.NoError(b, err)
		b.Run(fmt.Sprintf("%dx%d/msgpass", shape[0], shape[1]), func(b *testing.B) {
			var res mpResult
			cpu := cpuTime()
			for range b.N {
				var choice []int
				choice, res = p.certify()
				require.NotNil(b, choice)
			}
			b.ReportMetric(float64((cpuTime()-cpu).Milliseconds())/float64(b.N), "cpu-ms/op")
			b.ReportMetric(float64(res.iters), "sweeps")
			b.ReportMetric(1e9*(res.ub-res.lb)/res.ub, "gap-ppb") // relative, in 1e-9
		})
		b.Run(fmt.Sprintf("%dx%d/lp_solve", shape[0], shape[1]), func(b *testing.B) {
			cpu := cpuTime()
			for range b.N {
				_, err := ilp.Solve(context.Background(), p.prob, ilp.Options{}) // beyond 1x, ilp's memo answers
				require.NoError(b, err)
			}
			b.ReportMetric(float64((cpuTime()-cpu).Milliseconds())/float64(b.N), "cpu-ms/op")
		})
	}
}

// BenchmarkEnergyModel times the certificate's energy model alone (energyModel: the
// shared values' tables, fillTable) of wresnet-tiny's step on dgx-a100's 2×4 and 4×2
// meshes, the planner built outside the timer:
//
//	go test ./passes/sharding -run '^$' -bench EnergyModel
func BenchmarkEnergyModel(b *testing.B) {
	g := tinyStep(b, "wresnet-tiny")
	for _, shape := range [][2]int{{2, 4}, {4, 2}} {
		c, lm := benchMesh(b, "dgx-a100", shape[0], shape[1])
		p, err := newPlanner(g, lm, Options{Cluster: c})
		require.NoError(b, err)
		b.Run(fmt.Sprintf("wresnet-tiny/%dx%d", shape[0], shape[1]), func(b *testing.B) {
			var m *mpModel
			cpu := cpuTime()
			for range b.N {
				m, _, err = p.energyModel()
				require.NoError(b, err)
			}
			b.ReportMetric(float64((cpuTime()-cpu).Microseconds())/float64(b.N), "cpu-µs/op")
			cells := 0
			for _, f := range m.factors {
				cells += len(f.cost)
			}
			b.ReportMetric(float64(cells), "cells")
		})
	}
}
