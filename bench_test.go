package autopar

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	goruntime "runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/autopar/autopar/codegen"
	"github.com/autopar/autopar/frontend"
	"github.com/autopar/autopar/frontend/zoo"
	"github.com/autopar/autopar/ilp"
	"github.com/autopar/autopar/internal/gcpolicy"
	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/mesh"
	"github.com/autopar/autopar/passes"
	"github.com/autopar/autopar/program"
	"github.com/autopar/autopar/runtime"
	"github.com/autopar/autopar/runtime/interp"
)

// alpaSuite is the weak-scaling suite of Alpa's evaluation (OSDI'22, Fig. 7): each model at
// the GPU count it was measured on, in p3.16xlarge hosts of 8 V100s (1, 2 and 4 GPUs are
// part of a host).
var alpaSuite = []struct {
	model string
	gpus  int
}{
	{"gpt-350m", 1}, {"gpt-760m", 2}, {"gpt-1.3b", 4}, {"gpt-2.6b", 8}, {"gpt-6.7b", 16}, {"gpt-15b", 32}, {"gpt-39b", 64},
	{"moe-380m", 1}, {"moe-690m", 2}, {"moe-1.3b", 4}, {"moe-2.4b", 8}, {"moe-10b", 16}, {"moe-27b", 32}, {"moe-70b", 64},
	{"wresnet-250m", 1}, {"wresnet-500m", 2}, {"wresnet-1b", 4}, {"wresnet-2b", 8}, {"wresnet-4b", 16}, {"wresnet-6.8b", 32}, {"wresnet-13b", 64},
}

// alpaCap bounds each configuration of BenchmarkCompileAlpa (flag -alpa-cap): a compile
// still running then is cancelled and reported as over the cap (metric over-cap 1, its
// other metrics absent), so one run of the suite ends.
var alpaCap = flag.Duration("alpa-cap", 60*time.Second, "time cap of each configuration of BenchmarkCompileAlpa")

// alpaLayers is the layer count of BenchmarkCompileAlpa (flag -alpa-layers; 0: the
// compiler's automatic DefaultLayers).
var alpaLayers = flag.Int("alpa-layers", 0, "layers of BenchmarkCompileAlpa's compiles (0: automatic)")

// alpaMicrobatches is the micro-batch count of BenchmarkCompileAlpa (flag
// -alpa-microbatches; 0: searched, --microbatches auto).
var alpaMicrobatches = flag.Int("alpa-microbatches", 0, "micro-batches of BenchmarkCompileAlpa's compiles (0: auto)")

// alpaPlanDir, when set (flag -alpa-plan-dir DIR), makes BenchmarkCompileAlpa write each
// configuration's plan.json as DIR/<search>_<model>_<gpus>gpu.json, to compare the plans
// of two builds byte for byte.
var alpaPlanDir = flag.String("alpa-plan-dir", "", "write each plan of BenchmarkCompileAlpa as DIR/<search>_<model>_<gpus>gpu.json")

// BenchmarkCompileAlpa compiles every model of Alpa's suite for its cluster, micro-batches
// searched (--microbatches auto) and batch norm per micro-batch (--batch-norm microbatch,
// as Alpa computes it), by each search, and reports the compile time, the peak heap of the
// compiler, its CPU time, the ILPs solved, the largest ILP's variables and the predicted
// step. A compile past -alpa-cap is cancelled and reported as "over-cap", one that finds
// no plan as "no-plan" with the compiler's error in the log. Select one with
// -bench 'CompileAlpa/fast/gpt-1.3b/'. The collector is set as autopar compile sets it
// (internal/gcpolicy; GOGC in the environment overrides it).
func BenchmarkCompileAlpa(b *testing.B) {
	defer gcpolicy.ForSearch()()
	for _, search := range Searches {
		for _, tc := range alpaSuite {
			b.Run(fmt.Sprintf("%s/%s/%dgpu", search, tc.model, tc.gpus), func(b *testing.B) {
				g, c := alpaConfig(b, tc.model, tc.gpus)
				defer traceILPs(b, fmt.Sprintf("%s/%s/%dgpu", search, tc.model, tc.gpus))()
				defer countILPs(b)()
				defer traceStages(b, fmt.Sprintf("%s/%s/%dgpu", search, tc.model, tc.gpus))()
				opts := Options{Search: search, BatchNorm: BatchNormMicrobatch, Layers: *alpaLayers, Microbatches: *alpaMicrobatches}
				defer traceCounts(b)()
				b.ReportAllocs()
				for b.Loop() {
					ctx, cancel := context.WithTimeout(context.Background(), *alpaCap)
					start, cpu := time.Now(), cpuTime()
					peak := watchHeap()
					p, st, err := compileSearch(ctx, g, c, opts)
					heap := peak()
					over := ctx.Err() != nil
					cancel()
					// CPU seconds say what the compile costs on a machine others share.
					b.ReportMetric((cpuTime() - cpu).Seconds(), "cpu-s")
					if over {
						b.Logf("%s on %d GPUs: > %v (cancelled after %v)", tc.model, tc.gpus, *alpaCap, time.Since(start).Round(time.Millisecond))
						b.ReportMetric(1, "over-cap")
						continue
					}
					if err != nil {
						// A configuration without a plan (none fits in memory) is a row of
						// the table too: the suite goes on.
						b.Logf("%s on %d GPUs: no plan: %v", tc.model, tc.gpus, err)
						b.ReportMetric(1, "no-plan")
						continue
					}
					reportCompile(b, p, st, heap)
					if *alpaPlanDir != "" {
						writeAlpaPlan(b, p, fmt.Sprintf("%s_%s_%dgpu.json", search, tc.model, tc.gpus))
					}
				}
			})
		}
	}
}

// writeAlpaPlan writes p's plan.json into -alpa-plan-dir under name.
func writeAlpaPlan(b *testing.B, p *Plan, name string) {
	var buf bytes.Buffer
	if err := p.WriteJSON(&buf); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(*alpaPlanDir, name), buf.Bytes(), 0o644); err != nil {
		b.Fatal(err)
	}
}

// countILPs logs, when the configuration ends, the lp_solve calls it made (a sharding
// solve makes one per memory round and more for its fallbacks): solved, answered from the
// memo, stopped by their limit (a feasible point or none), the most CPU one took and the
// largest. Counted even past -alpa-cap, where the metrics are absent. Off under
// -ilp-trace and -stage-trace, which install their own tracers.
func countILPs(b *testing.B) func() {
	if *ilpTrace != "" || *stageTraceFile != "" {
		return func() {}
	}
	var mu sync.Mutex
	var solved, cached, limited, vars int
	var cpu, most time.Duration
	restore := ilp.Trace(func(p *ilp.Problem, st ilp.Stats) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case st.Cached:
			cached++
			return
		case st.Err != nil:
			limited++
		}
		solved++
		cpu += st.CPU
		most = max(most, st.CPU)
		vars = max(vars, st.Vars)
	})
	return func() {
		restore()
		mu.Lock()
		defer mu.Unlock()
		b.Logf("lp_solve: %d solves (%d not optimal: a limit or no point), %d from the memo; %.1f CPU s in all, the dearest %.1f s; largest %d variables",
			solved, limited, cached, cpu.Seconds(), most.Seconds(), vars)
	}
}

// alpaConfig reads a model of Alpa's suite and its cluster: p3.16xlarge hosts, 1–4 GPUs a
// part of one.
func alpaConfig(b *testing.B, name string, gpus int) (*ir.Graph, *mesh.Cluster) {
	path := "testdata/models/" + name + ".ir"
	g, err := frontend.ParseFile(path)
	if err != nil {
		b.Fatal(err)
	}
	c := cluster(b, fmt.Sprintf("p3.16xlarge:%d", max(1, gpus/8)))
	if gpus < 8 {
		c.DevicesPerHost = gpus
	}
	return g, c
}

// BenchmarkCompileTiny is the first thing a new user tries: the tiny GPT on one DGX A100
// (8 GPUs), micro-batches searched, by each search.
func BenchmarkCompileTiny(b *testing.B) {
	defer gcpolicy.ForSearch()()
	g := model(b, "gpt-tiny")
	for _, search := range Searches {
		b.Run(search, func(b *testing.B) {
			benchCompile(b, g, cluster(b, "dgx-a100:1"), Options{Search: search})
		})
	}
}

// benchCompile compiles g on c with opts once per iteration and reports what the search did.
func benchCompile(b *testing.B, g *ir.Graph, c *mesh.Cluster, opts Options) {
	b.ReportAllocs()
	for b.Loop() {
		peak := watchHeap()
		p, st, err := compileSearch(context.Background(), g, c, opts)
		heap := peak()
		if err != nil {
			b.Fatal(err)
		}
		reportCompile(b, p, st, heap)
	}
}

// reportCompile reports what a compile's search did and the plan it found.
func reportCompile(b *testing.B, p *Plan, st searchStats, heap uint64) {
	b.ReportMetric(float64(heap)/(1<<20), "peak-heap-MiB")
	b.ReportMetric(float64(len(p.Stages)), "stages")
	b.ReportMetric(float64(p.Microbatches), "microbatches")
	b.ReportMetric(float64(st.solves), "ilps")
	b.ReportMetric(float64(st.largestILP), "largest-ilp-vars")
	b.ReportMetric(float64(st.skipped), "skipped-counts")
	b.ReportMetric(float64(st.bounded), "unsolved-layers")
	b.ReportMetric(p.Predicted.StepTime*1e6, "pred-step-µs")
}

// watchHeap samples the heap in use every 5 ms until the returned function is called,
// which returns the largest sample.
func watchHeap() func() uint64 {
	var mu sync.Mutex
	var peak uint64
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		var ms goruntime.MemStats
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for {
			goruntime.ReadMemStats(&ms)
			mu.Lock()
			peak = max(peak, ms.HeapInuse)
			mu.Unlock()
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	return func() uint64 {
		close(done)
		<-stopped
		return peak
	}
}

// BenchmarkRuntimeStep times one training step of a compute-heavy MLP (4 layers of 1024,
// batch 512, f32) on the serial interpreter and on the runtime under data-parallel plans
// of 1, 2 and 4 devices: the runtime's speed-up and its overhead against the reference.
func BenchmarkRuntimeStep(b *testing.B) {
	m := zoo.NewMLP()
	m.Layers, m.Hidden, m.Batch, m.In, m.Classes = 4, 1024, 512, 1024, 16
	g, err := m.Build()
	if err != nil {
		b.Fatal(err)
	}
	opt := passes.Optimizer{Kind: "sgd", LR: 0.01}
	full, err := passes.TrainingStep(g, opt)
	if err != nil {
		b.Fatal(err)
	}
	feeds := interp.InitParams(full, 1)
	data, err := interp.GenerateInputs(full, 2)
	if err != nil {
		b.Fatal(err)
	}
	for k, v := range data {
		feeds[k] = v
	}
	ctx := context.Background()
	b.Run("serial", func(b *testing.B) {
		for b.Loop() {
			if _, err := interp.Run(ctx, full, feeds); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, n := range []int{1, 2, 4} {
		b.Run(fmt.Sprintf("runtime/dp=%d", n), func(b *testing.B) {
			c := cluster(b, fmt.Sprintf("cpu:%d", n))
			p, err := Compile(ctx, g, c, Options{Optimizer: opt, Microbatches: 1, Manual: &Manual{TP: 1, PP: 1, DP: n}})
			if err != nil {
				b.Fatal(err)
			}
			progs, err := p.Programs()
			if err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				if _, err := runtime.Run(ctx, progs, runtime.Data(feeds), runtime.Options{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkTrainerStep times one training step of BenchmarkRuntimeStep's MLP two ways
// under the same plans: the loop every caller wrote before the Trainer (runtime.Run on
// whole params and data, then the updated params copied back into the feeds), and
// Trainer.Step, which keeps the params on the devices. host-MB/step is what moves between
// the host and the devices (loads from feeds and stores assembled); sent-MB/step the
// transport's traffic, which must be the plan's prediction (codegen.Predict) in both.
func BenchmarkTrainerStep(b *testing.B) {
	m := zoo.NewMLP()
	m.Layers, m.Hidden, m.Batch, m.In, m.Classes = 4, 1024, 512, 1024, 16
	g, err := m.Build()
	if err != nil {
		b.Fatal(err)
	}
	opt := passes.Optimizer{Kind: "sgd", LR: 0.01, Momentum: 0.9}
	ctx := context.Background()
	for _, man := range []*Manual{{TP: 1, PP: 1, DP: 2}, {TP: 2, PP: 1, DP: 1}} {
		p, err := Compile(ctx, g, cluster(b, "cpu:2"), Options{Optimizer: opt, Microbatches: 1, Manual: man})
		if err != nil {
			b.Fatal(err)
		}
		progs, err := p.Programs()
		if err != nil {
			b.Fatal(err)
		}
		var sent int64
		for _, c := range codegen.Predict(nil, progs) {
			sent += c.BytesSent
		}
		full, err := passes.TrainingStep(g, opt)
		if err != nil {
			b.Fatal(err)
		}
		data, err := interp.GenerateInputs(full, 2)
		if err != nil {
			b.Fatal(err)
		}
		// cpu-ms/step is the process's CPU time (user + system) per step: the work a step
		// does, which other processes on a shared machine slow down far less than ns/op.
		var cpu0 time.Duration
		startCPU := func() { cpu0 = cpuTime() }
		report := func(b *testing.B, res *runtime.Result) {
			b.ReportMetric(float64((cpuTime()-cpu0).Milliseconds())/float64(b.N), "cpu-ms/step")
			var host, got int64
			for _, d := range res.Devices {
				host += d.FeedBytes + d.StoreBytes
				got += d.BytesSent
			}
			if got != sent {
				b.Fatalf("sent %d bytes, the plan predicts %d", got, sent)
			}
			b.ReportMetric(float64(host)/1e6, "host-MB/step")
			b.ReportMetric(float64(got)/1e6, "sent-MB/step")
		}
		b.Run(fmt.Sprintf("run+copy/%s", man), func(b *testing.B) {
			feeds := interp.InitParams(full, 1)
			maps.Copy(feeds, data)
			var res *runtime.Result
			startCPU()
			for b.Loop() {
				if res, err = runtime.Run(ctx, progs, runtime.Data(feeds), runtime.Options{}); err != nil {
					b.Fatal(err)
				}
				for _, u := range full.Updates {
					name := full.Value(u.Target).Name
					feeds[name] = res.Stores[name]
				}
			}
			report(b, res)
		})
		// What the Trainer may move between host and devices: each device's blocks of the
		// data inputs, per micro-batch, in; the loss out.
		var dataBytes int64
		for _, p := range progs {
			for _, in := range p.Instrs {
				if _, ok := data[in.Name]; ok && in.Kind == program.Load {
					dataBytes += p.Buffers[in.Out].Type.Bytes() * int64(p.Microbatches)
				}
			}
		}
		lossBytes := full.Value(full.Outputs[0].Value).Type.Bytes()
		b.Run(fmt.Sprintf("trainer/%s", man), func(b *testing.B) {
			tr, err := NewTrainer(ctx, p, TrainerOptions{Seed: 1})
			if err != nil {
				b.Fatal(err)
			}
			batch := Batch{}
			for k, v := range data {
				batch[k] = v
			}
			startCPU()
			for b.Loop() {
				if _, err := tr.Step(ctx, batch); err != nil {
					b.Fatal(err)
				}
			}
			report(b, tr.LastResult())
			var in, out int64
			for _, d := range tr.LastResult().Devices {
				in += d.FeedBytes
				out += d.StoreBytes
			}
			if in != dataBytes || out != lossBytes || len(tr.Hosted()) > 0 {
				b.Fatalf("host traffic: %d bytes in, %d out, hosted %v; expected the data's %d in and the loss's %d out", in, out, tr.Hosted(), dataBytes, lossBytes)
			}
		})
	}
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkCompileHugeCluster compiles the tiny MLP for clusters of 16, 17 and 10,000
// p3.16xlarge hosts with one micro-batch: past dp.ExhaustiveHosts the search enumerates
// shapes, so its ILP count and heap stay bounded (issue 10: 10,000 hosts was OOM-killed at
// 24 GiB). Select one with -bench 'CompileHugeCluster/10000'.
func BenchmarkCompileHugeCluster(b *testing.B) {
	g := model(b, "mlp-tiny")
	for _, hosts := range []int{16, 17, 10000} {
		b.Run(fmt.Sprint(hosts), func(b *testing.B) {
			c := cluster(b, fmt.Sprintf("p3.16xlarge:%d", hosts))
			for b.Loop() {
				peak := watchHeap()
				p, err := Compile(context.Background(), g, c, Options{Microbatches: 1})
				heap := peak()
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(heap)/(1<<20), "peak-heap-MiB")
				b.ReportMetric(float64(p.Predicted.Solves), "ilps")
			}
		})
	}
}

// countTraceFlag (flag -count-trace) makes BenchmarkCompileAlpa log, per micro-batch count
// in the order the search takes them, its bound, what became of it, its plan's step, the
// ILPs and the CPU seconds of the compile so far (compile.go, countTrace).
var countTraceFlag = flag.Bool("count-trace", false, "log what BenchmarkCompileAlpa's search does with each micro-batch count")

func traceCounts(b *testing.B) func() {
	if !*countTraceFlag {
		return func() {}
	}
	cpu0 := cpuTime()
	countTrace = func(mb int, bound float64, outcome string, step float64, solves int64) {
		// To stderr: a benchmark's log keeps ten lines.
		fmt.Fprintf(os.Stderr, "%s: count %d: bound %.6f s, %s, step %.6f s, %d ILPs, %.1f CPU s\n", b.Name(), mb, bound, outcome, step, solves,
			(cpuTime() - cpu0).Seconds())
	}
	return func() { countTrace = nil }
}
