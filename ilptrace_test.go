package autopar

import (
	"context"
	"encoding/gob"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/autopar/autopar/ilp"
)

// ilpTrace (flag -ilp-trace FILE) makes BenchmarkCompileAlpa write one CSV line per lp_solve
// call to FILE: size, build and solve time, lp_solve's iterations and nodes, whether the
// root LP relaxation was already integral, the outcome, and whether lp_solve started warm
// (from an earlier solve's basis, ilp.Options.Start), and its kind and budget (ilpKind) (found by solving the relaxation again, so a
// traced run is slower than a plain one and its times are per solve, not end to end).
var ilpTrace = flag.String("ilp-trace", "", "write a CSV line per lp_solve call of BenchmarkCompileAlpa to this file")

// ilpDump (flag -ilp-dump DIR, with -ilp-trace) also writes each traced problem, gob-encoded,
// to DIR/NNNN.gob, a corpus for replaying the solver under other settings.
var ilpDump = flag.String("ilp-dump", "", "with -ilp-trace, write each traced ILP as DIR/NNNN.gob")

// traceILPs installs the tracer of -ilp-trace for one configuration; the returned function
// removes it and closes the file.
func traceILPs(b *testing.B, config string) func() {
	if *ilpTrace == "" {
		return func() {}
	}
	f, err := os.OpenFile(*ilpTrace, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		b.Fatal(err)
	}
	var mu sync.Mutex
	restore := ilp.Trace(func(p *ilp.Problem, st ilp.Stats) {
		if !hasIntegers(p) {
			return // the relaxation solved below
		}
		root, status := "-", "cached"
		if !st.Cached {
			root, status = rootIntegral(p), "optimal"
			if st.Err != nil {
				status = fmt.Sprintf("%q", st.Err.Error())
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if *ilpDump != "" && !st.Cached {
			dumpILP(b, p, st)
		}
		start := "cold"
		if st.Warm {
			start = "warm"
		}
		if st.Incumbent != nil {
			start += "+incumbent"
		}
		kind, budget := ilpKind(p)
		fmt.Fprintf(f, "%s,%d,%d,%.0f,%.3f,%.3f,%.3f,%d,%d,%s,%s,%s,%s,%.0f\n", config, st.Vars, st.Rows, st.Limit.Seconds(),
			st.Build.Seconds()*1e3, st.Wall.Seconds()*1e3, st.CPU.Seconds()*1e3, st.Iterations, st.Nodes, root, status, start, kind, budget)
	})
	return func() {
		restore()
		f.Close()
	}
}

var dumped int

// ilpKind names what a traced sharding ILP is: "minpeak" (passes/sharding's min-peak ILP,
// whose objective is its one continuous peak variable), "plan" with the right-hand side of
// its memory rows (the budget, in bytes; 0 when it has none).
func ilpKind(p *ilp.Problem) (string, float64) {
	if len(p.Objective) == 1 && p.VarName(p.Objective[0].Var) == "peak" {
		return "minpeak", 0
	}
	for _, r := range p.Rows {
		if strings.HasPrefix(r.Name, "mem.t") {
			return "plan", r.RHS
		}
	}
	return "plan", 0
}

// dumpILP writes p and its limit as the next file of the -ilp-dump corpus.
func dumpILP(b *testing.B, p *ilp.Problem, st ilp.Stats) {
	dumped++
	f, err := os.Create(filepath.Join(*ilpDump, fmt.Sprintf("%04d.gob", dumped)))
	if err != nil {
		b.Error(err)
		return
	}
	defer f.Close()
	if err := gob.NewEncoder(f).Encode(struct {
		P         *ilp.Problem
		Limit     time.Duration
		Incumbent []float64
	}{p, st.Limit, st.Incumbent}); err != nil {
		b.Error(err)
	}
}

func hasIntegers(p *ilp.Problem) bool {
	for _, v := range p.Vars {
		if v.Kind != ilp.Continuous {
			return true
		}
	}
	return false
}

// rootIntegral solves p's LP relaxation and says whether its optimum is integral.
func rootIntegral(p *ilp.Problem) string {
	q := *p
	q.Vars = append([]ilp.Var(nil), p.Vars...)
	for i := range q.Vars {
		q.Vars[i].Kind = ilp.Continuous
	}
	sol, err := ilp.Solve(context.Background(), &q, ilp.Options{})
	if err != nil {
		return "error"
	}
	for i, v := range p.Vars {
		if x := sol.Values[i]; v.Kind != ilp.Continuous && math.Abs(x-math.Round(x)) > 1e-6 {
			return "fractional"
		}
	}
	return "integral"
}

// stageTraceFile (flag -stage-trace FILE) makes BenchmarkCompileAlpa write one CSV line per
// sharding solve of the oracle (oracle.traced): which stage, structure, submesh, logical
// mesh, micro-batch count, budget and kind, then its lp_solve calls (solved, from the
// memo), their iterations, B&B nodes and most variables, their CPU, the solve's thread CPU
// and wall time, and how it ended.
var stageTraceFile = flag.String("stage-trace", "", "write a CSV line per sharding solve of BenchmarkCompileAlpa's oracle to this file")

func traceStages(b *testing.B, config string) func() {
	if *stageTraceFile == "" {
		return func() {}
	}
	f, err := os.OpenFile(*stageTraceFile, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		b.Fatal(err)
	}
	type agg struct {
		solves, cached, iters, nodes, vars int
		cpu                                time.Duration
	}
	var mu sync.Mutex
	active := map[int]*agg{}
	restore := ilp.Trace(func(p *ilp.Problem, st ilp.Stats) {
		mu.Lock()
		defer mu.Unlock()
		a := active[syscall.Gettid()]
		if a == nil {
			return
		}
		if st.Cached {
			a.cached++
			return
		}
		if *ilpDump != "" && st.Vars >= 10000 {
			dumpILP(b, p, st) // the big ones only, without -ilp-trace's root solve
		}
		a.solves++
		a.iters += int(st.Iterations)
		a.nodes += int(st.Nodes)
		a.vars = max(a.vars, st.Vars)
		a.cpu += st.CPU
	})
	start := time.Now()
	stageTrace = func(label string, run func() string) {
		goruntime.LockOSThread()
		defer goruntime.UnlockOSThread()
		tid := syscall.Gettid()
		a := &agg{}
		mu.Lock()
		active[tid] = a
		mu.Unlock()
		cpu0, t0 := threadCPU(), time.Now()
		outcome := run()
		cpu, wall := threadCPU()-cpu0, time.Since(t0)
		mu.Lock()
		delete(active, tid)
		fmt.Fprintf(f, "%s,%.1f,%s,%d,%d,%d,%d,%d,%.0f,%.0f,%.0f,%q\n", config, t0.Sub(start).Seconds(), label, a.solves, a.cached, a.vars, a.iters, a.nodes,
			a.cpu.Seconds()*1e3, cpu.Seconds()*1e3, wall.Seconds()*1e3, outcome)
		mu.Unlock()
	}
	return func() {
		stageTrace = nil
		restore()
		f.Close()
	}
}

// threadCPU is the calling thread's CPU time (RUSAGE_THREAD).
func threadCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(1, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
