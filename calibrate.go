package autopar

import (
	"context"
	"fmt"
	"io"
	"math"
	goruntime "runtime"
	"sort"
	"sync"
	"time"

	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/mesh"
	"github.com/autopar/autopar/program"
	"github.com/autopar/autopar/runtime"
	"github.com/autopar/autopar/runtime/kernels"
)

// CalibrateOptions configure Calibrate.
type CalibrateOptions struct {
	// Devices is the device count of the cpu cluster measured (cpu:N); at least 1.
	Devices int
	// Quick measures small sizes for a few milliseconds each: a second in all, for tests.
	// The numbers are rougher; a real calibration leaves it off (under a minute).
	Quick bool
	// Report, if set, gets one line per measurement.
	Report io.Writer
}

// Calibrate measures the built-in runtime on this machine the way Alpa profiles its
// cluster, and returns the cpu cluster of opts.Devices devices priced by what it measured:
//
//   - the FLOP rate of matmul, einsum and conv2d kernels in f32 and f16 (flops.matmul:
//     matmuls and a transformer's projections; flops.batched_matmul: its attention
//     einsums, which run a GEMM per batch element on permuted operands; flops.conv): the
//     slope of a least-squares line through their times at several sizes;
//   - the FLOP rate of vector work (flops.vector: add, mul, exp, gelu, softmax, compares
//     and selects) and of reductions (flops.reduce: reduce_sum, reduce_mean, layer_norm,
//     cumsum), and the memory bandwidth of the layout kernels;
//   - the overhead of one instruction: a kernel on one element, and the runtime's reading
//     of its thread's CPU clock after every instruction; then what a real program's
//     instructions cost beyond that (programOverhead: the zoo's tiny MLP run on the
//     runtime, data-parallel over the devices);
//   - α and β of each collective for each group size the cluster's meshes use (powers of
//     two up to the device count, and the count itself), on the in-process transport.
//
// Everything is measured in the CPU time of the measuring threads (runtime.ThreadCPU), as
// the runtime measures its devices under runtime.Options.CPUTime, and every contraction
// runs on one core (kernels.OneCore): the cluster it returns prices a device as one core
// of this machine with nothing else running, which is what holds still on a shared,
// loaded machine. So host_cores is left 0 (devices do not share cores): a prediction on
// this cluster is the step with a core per device, and is compared with the runtime's
// CPU-time step (runtime.CPUStep), not with the wall clock of a machine with fewer cores
// than devices (docs/DECISIONS.md, "CPU time"). Kernels run on one goroutine; collectives
// on all their group's goroutines at once, as in the runtime. Times are medians of
// repeated rounds.
func Calibrate(ctx context.Context, opts CalibrateOptions) (*mesh.Cluster, error) {
	if opts.Devices < 1 {
		return nil, fmt.Errorf("calibrate: devices must be at least 1, got %d", opts.Devices)
	}
	if !runtime.CPUTimeSupported {
		return nil, fmt.Errorf("calibrate: measures per-thread CPU time, which this runtime reads on Linux only")
	}
	c, err := mesh.ParseCluster(fmt.Sprintf("cpu:%d", opts.Devices))
	if err != nil {
		return nil, err
	}
	defer kernels.OneCore()()
	cal := &calibrator{ctx: ctx, n: opts.Devices, quick: opts.Quick, report: opts.Report}
	c.Name = "cpu-calibrated"
	c.Efficiency = 1
	c.HostCores = 0
	cal.overhead()
	clock := cal.clockRead()
	c.KernelOverhead = cal.instruction()
	var mm, bmm, conv mesh.Rates
	var mmOver, bmmOver, convOver float64
	mm.F32, mmOver = cal.matmulRate(ir.F32)
	mm.F16, _ = cal.matmulRate(ir.F16)
	bmm.F32, bmmOver = cal.batchedRate(ir.F32)
	bmm.F16, _ = cal.batchedRate(ir.F16)
	conv.F32, convOver = cal.convRate(ir.F32)
	conv.F16, _ = cal.convRate(ir.F16)
	c.FLOPs = &mesh.FLOPTable{
		Matmul:        &mm,
		BatchedMatmul: &bmm,
		Conv:          &conv,
		Vector:        &mesh.Rates{F32: cal.vectorRate(ir.F32), F16: cal.vectorRate(ir.F16)},
		Reduce:        &mesh.Rates{F32: cal.reduceRate(ir.F32), F16: cal.reduceRate(ir.F16)},
	}
	c.ClassOverhead = &mesh.ClassOverheads{Matmul: mmOver, BatchedMatmul: bmmOver, Conv: convOver}
	c.DeviceMemoryBandwidth = cal.bandwidth()
	c.DeviceFLOPS = c.FLOPs.Matmul.F32
	c.Collectives = cal.collectives(2 * clock)
	if f := fitOf(c.Collectives, mesh.AllGather, 2); f != nil && f.Beta > 0 {
		c.IntraHostLatency, c.IntraHostBandwidth = f.Alpha, 1/f.Beta
		c.InterHostLatency, c.InterHostBandwidth = f.Alpha, 1/f.Beta
	}
	if cal.err != nil {
		return nil, cal.err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("calibrate: the measurements make no cluster: %w", err)
	}
	c.KernelOverhead += cal.programOverhead(c)
	if cal.err != nil {
		return nil, cal.err
	}
	return c, nil
}

func fitOf(fits []mesh.CollectiveFit, k mesh.Collective, n int) *mesh.CollectiveFit {
	for i := range fits {
		if fits[i].Kind == k && fits[i].Devices == n {
			return &fits[i]
		}
	}
	return nil
}

type calibrator struct {
	ctx    context.Context
	n      int
	quick  bool
	report io.Writer
	err    error
	over   float64
}

func (c *calibrator) logf(format string, args ...any) {
	if c.report != nil {
		fmt.Fprintf(c.report, format+"\n", args...)
	}
}

// round is how long one timed round lasts; rounds how many are taken (the median counts).
func (c *calibrator) round() time.Duration {
	if c.quick {
		return 2 * time.Millisecond
	}
	return 8 * time.Millisecond
}

func (c *calibrator) rounds() int {
	if c.quick {
		return 3
	}
	return 5
}

// timeConcurrent runs f on workers goroutines at once, each locked to its OS thread and
// calling it in a loop, and returns the median over rounds of the CPU seconds one call
// takes on its thread (the mean over the workers) while all run: the work done, whatever
// else the machine runs, as the runtime measures its devices (runtime.Options.CPUTime).
func (c *calibrator) timeConcurrent(workers int, f func(w int) error) float64 {
	return c.timeStaggered(workers, -1, f)
}

// timeStaggered is timeConcurrent with worker late (−1: none) arriving late at every call:
// it sleeps lateBy first, so that the others wait for it, and its CPU time is left out of
// the mean. A collective is timed so, as the runtime runs it: its devices seldom arrive
// together, and one that waits pays the Go scheduler's park and wake of its locked
// thread, CPU that members arriving in lockstep would not show.
func (c *calibrator) timeStaggered(workers, late int, f func(w int) error) float64 {
	if c.err != nil || c.ctx.Err() != nil {
		return math.NaN()
	}
	rounds := c.rounds()
	if late >= 0 {
		rounds = min(rounds, 3) // its sleeps make rounds long in wall time
	}
	// Size the loop so a round lasts about c.round().
	iters := 1
	for {
		t := c.once(workers, late, iters, f)
		if c.err != nil {
			return math.NaN()
		}
		if t >= c.round().Seconds()/4 || iters >= 1<<20 {
			iters = max(1, int(float64(iters)*c.round().Seconds()/math.Max(t, 1e-9)))
			break
		}
		iters *= 4
	}
	var ts []float64
	for range rounds {
		ts = append(ts, c.once(workers, late, iters, f)/float64(iters))
	}
	sort.Float64s(ts)
	return ts[len(ts)/2]
}

// once times iters calls of f on each of workers goroutines started together, and returns
// the mean over the workers but late of their threads' CPU seconds (see timeStaggered).
func (c *calibrator) once(workers, late, iters int, f func(w int) error) float64 {
	var wg sync.WaitGroup
	var mu sync.Mutex
	start := make(chan struct{})
	cpu := make([]time.Duration, workers)
	for w := range workers {
		wg.Go(func() {
			goruntime.LockOSThread()
			defer goruntime.UnlockOSThread()
			<-start
			c0 := runtime.ThreadCPU()
			defer func() { cpu[w] = runtime.ThreadCPU() - c0 }()
			for range iters {
				if w == late {
					time.Sleep(lateBy)
				}
				if err := f(w); err != nil {
					mu.Lock()
					if c.err == nil {
						c.err = fmt.Errorf("calibrate: %w", err)
					}
					mu.Unlock()
					return
				}
			}
		})
	}
	close(start)
	wg.Wait()
	var sum time.Duration
	n := 0
	for w, t := range cpu {
		if w != late {
			sum, n = sum+t, n+1
		}
	}
	return sum.Seconds() / float64(n)
}

// lateBy is how late the late member of a timed collective arrives.
const lateBy = 20 * time.Microsecond

// kernelCase is one kernel call to time: op, attributes and operands.
type kernelCase struct {
	op    ir.Op
	at    ir.Attrs
	args  []ir.Type
	out   ir.Type
	flops float64
	bytes float64
}

func newCase(op ir.Op, at ir.Attrs, args ...ir.Type) kernelCase {
	named := make([]ir.Arg, len(args))
	bytes := 0.0
	for i, t := range args {
		named[i] = ir.Arg{Name: fmt.Sprintf("x%d", i), Type: t}
		bytes += float64(t.Bytes())
	}
	out, err := op.Def().Infer(named, at)
	if err != nil {
		panic("autopar: calibration case: " + err.Error())
	}
	return kernelCase{op: op, at: at, args: args, out: out,
		flops: op.Def().FLOPs(args, at, out), bytes: bytes + float64(out.Bytes())}
}

// timeCase is the median CPU seconds of one call of k on one thread.
func (c *calibrator) timeCase(k kernelCase) float64 { return c.timeCaseOn(1, k) }

// timeCaseOn is the median seconds of one call of k on each of workers devices at once.
// Each call takes the next of several copies of the operands, as many as make a few MiB
// (coldBytes): a kernel in a program reads operands that other kernels wrote a while
// before, not the ones it has just read, so timing one set of operands over and over
// (hot in the caches) would price kernels faster than programs run them.
func (c *calibrator) timeCaseOn(workers int, k kernelCase) float64 {
	copies := 1
	if !c.quick {
		copies = max(1, min(32, int(coldBytes/math.Max(k.bytes, 1))))
	}
	ins := make([][][]*kernels.Tensor, workers)
	for w := range ins {
		ins[w] = make([][]*kernels.Tensor, copies)
		for j := range copies {
			for i, t := range k.args {
				x := kernels.New(t)
				for e := range x.Len() {
					x.Set(e, 0.5+float64((e*7+i)%13)/26)
				}
				ins[w][j] = append(ins[w][j], x)
			}
		}
	}
	next := make([]int, workers)
	return c.timeConcurrent(workers, func(w int) error {
		j := next[w]
		next[w] = (j + 1) % copies
		_, err := kernels.Eval(k.op, k.at, k.out, ins[w][j])
		return err
	})
}

// coldBytes is how many bytes of operands a case cycles through: beyond this machine's
// per-core caches (L2 is 2 MiB on the development machine), as a program's working set is.
const coldBytes = 4 << 20

// clockRead is the CPU time of one reading of the thread's CPU clock, which the runtime
// takes before and after every communication instruction when it measures CPU time.
func (c *calibrator) clockRead() float64 {
	t := c.timeConcurrent(1, func(int) error {
		runtime.ThreadCPU()
		return nil
	})
	c.logf("cpu clock read            %8.2f µs", t*1e6)
	return t
}

// instruction is the CPU time the runtime spends on one compute instruction whose kernel
// does next to nothing, freeing its result included (every result is freed): the slope,
// over two program lengths, of a one-device program of one-element adds, each followed by
// the free of its result, run under runtime.Options.CPUTime. Beyond the kernel, this is
// the runtime's dispatch and bookkeeping of the instruction and of its free.
func (c *calibrator) instruction() float64 {
	one := ir.Type{DType: ir.F32, Shape: ir.Shape{1, 1}}
	build := func(n int) *program.Program {
		p := &program.Program{Device: 0}
		x := p.AddBuffer("x", one)
		p.Instrs = append(p.Instrs, program.Instr{Kind: program.Load, Name: "x", Offsets: []int{0, 0}, Out: x})
		for i := range n {
			y := p.AddBuffer(fmt.Sprintf("y%d", i), one)
			p.Instrs = append(p.Instrs,
				program.Instr{Kind: program.Compute, Op: ir.OpAdd, Args: []program.BufferID{x, x}, Out: y},
				program.Instr{Kind: program.Free, Args: []program.BufferID{y}, Out: program.NoBuffer})
		}
		p.Instrs = append(p.Instrs, program.Instr{Kind: program.Free, Args: []program.BufferID{x}, Out: program.NoBuffer})
		return p
	}
	short, long := 100, 1600
	ps, pl := build(short), build(long)
	data := runtime.Data{"x": kernels.New(one)}
	run := func(p *program.Program) float64 {
		if c.err != nil || c.ctx.Err() != nil {
			return math.NaN()
		}
		r, err := runtime.Run(c.ctx, []*program.Program{p}, data, runtime.Options{CPUTime: true})
		if err != nil {
			c.err = fmt.Errorf("calibrate: the instruction overhead's program: %w", err)
			return math.NaN()
		}
		var sum time.Duration
		for _, s := range r.Devices[0].CPUSpans {
			sum += s
		}
		return sum.Seconds()
	}
	var ts []float64
	for range 5 * c.rounds() {
		ts = append(ts, (run(pl)-run(ps))/float64(long-short))
	}
	sort.Float64s(ts)
	t := math.Max(ts[len(ts)/2], c.over)
	c.logf("runtime instruction       %8.2f µs  (compute and free of its result)", t*1e6)
	return t
}

// overhead is the time of one instruction that does next to nothing: the median of a
// one-element add, relu and matmul.
func (c *calibrator) overhead() float64 {
	one := ir.Type{DType: ir.F32, Shape: ir.Shape{1, 1}}
	var ts []float64
	for _, k := range []kernelCase{newCase(ir.OpAdd, nil, one, one), newCase(ir.OpRelu, nil, one),
		newCase(ir.OpMatMul, nil, one, one)} {
		ts = append(ts, c.timeCase(k))
	}
	sort.Float64s(ts)
	c.over = ts[1]
	c.logf("kernel on one element     %8.2f µs", c.over*1e6)
	return c.over
}

// rateFit times the cases and returns the FLOP rate of the line through (FLOPs, time)
// fitted to relative error (least squares on time/t_i, so small kernels count as much as
// large ones: a plan's error is relative): its inverse slope, and its intercept beyond a
// one-element kernel's time, the fixed cost of the class (not negative). A slope that is
// not positive (noise) falls back to the FLOPs of all cases over their time less the
// overhead, and no fixed cost.
func (c *calibrator) rateFit(what string, cases []kernelCase) (float64, float64) {
	var xs, ys []float64
	for _, k := range cases {
		t := c.timeCase(k)
		xs, ys = append(xs, k.flops), append(ys, t)
		c.logf("%-25s %8.2f µs  %7.3f GFLOP/s  (%s)", what, t*1e6, k.flops/t/1e9, k.out)
	}
	a, slope := relativeLineFit(xs, ys)
	if !(slope > 0) {
		var f, t float64
		for i := range xs {
			f, t = f+xs[i], t+math.Max(ys[i]-c.over, ys[i]/2)
		}
		return f / t, 0
	}
	return 1 / slope, math.Max(0, a-c.over)
}

func (c *calibrator) sizes() []int {
	if c.quick {
		return []int{16, 32}
	}
	return []int{16, 32, 64, 128}
}

// sizesFor is the first n of sizes for f32, one fewer for the half precisions (emulated
// on this runtime, slow, and seldom what a model computes in: fewer cases keep calibrate
// under a minute).
func (c *calibrator) sizesFor(dt ir.DType, n int) []int {
	s := c.sizes()
	if dt != ir.F32 {
		n--
	}
	return s[:max(1, min(n, len(s)))]
}

// matmulRate is the rate of contractions in dt and their fixed cost (rateFit).
func (c *calibrator) matmulRate(dt ir.DType) (float64, float64) {
	var cases []kernelCase
	for _, s := range c.sizesFor(dt, 4) {
		a := ir.Type{DType: dt, Shape: ir.Shape{s, s}}
		cases = append(cases, newCase(ir.OpMatMul, nil, a, a))
		// The projections of a transformer at batch 2, and their weight gradient.
		x := ir.Type{DType: dt, Shape: ir.Shape{2, s, s}}
		cases = append(cases,
			newCase(ir.OpEinsum, ir.Attrs{}.With("spec", "bsi,io->bso"), x, a),
			newCase(ir.OpEinsum, ir.Attrs{}.With("spec", "bsi,bso->io"), x, x))
	}
	r, o := c.rateFit("matmul/einsum "+dt.String(), cases)
	c.logf("matmul rate %-4s          %8.3f GFLOP/s  fixed %6.2f µs", dt, r/1e9, o*1e6)
	return r, o
}

// batchedRate is the rate of contractions with a batch label in dt and their fixed cost
// (rateFit): a transformer's attention einsums at batch 4 and 4 heads of 8 over s
// positions (scores, context and both their gradients, operands permuted as models have
// them: 16 small GEMMs a kernel, as tiny models run them) and a mixture of experts'
// per-expert GEMMs.
func (c *calibrator) batchedRate(dt ir.DType) (float64, float64) {
	var cases []kernelCase
	for _, s := range c.sizesFor(dt, 3) {
		heads := ir.Type{DType: dt, Shape: ir.Shape{4, s, 4, 8}}
		probs := ir.Type{DType: dt, Shape: ir.Shape{4, 4, s, s}}
		tokens := ir.Type{DType: dt, Shape: ir.Shape{4, s, 16}}
		experts := ir.Type{DType: dt, Shape: ir.Shape{4, 16, s}}
		cases = append(cases,
			newCase(ir.OpEinsum, ir.Attrs{}.With("spec", "bqnd,bknd->bnqk"), heads, heads),
			newCase(ir.OpEinsum, ir.Attrs{}.With("spec", "bnqk,bknd->bqnd"), probs, heads),
			newCase(ir.OpEinsum, ir.Attrs{}.With("spec", "bnqk,bqnd->bknd"), probs, heads),
			newCase(ir.OpEinsum, ir.Attrs{}.With("spec", "ecd,edf->ecf"), tokens, experts))
	}
	r, o := c.rateFit("batched einsum "+dt.String(), cases)
	c.logf("batched rate %-4s         %8.3f GFLOP/s  fixed %6.2f µs", dt, r/1e9, o*1e6)
	return r, o
}

// convRate is the rate of convolutions in dt and their fixed cost (rateFit).
func (c *calibrator) convRate(dt ir.DType) (float64, float64) {
	at := ir.Attrs{}.With("stride", []int{1, 1}).With("pad", []int{1, 1})
	one := ir.Attrs{}.With("stride", []int{1, 1}).With("pad", []int{0, 0})
	var cases []kernelCase
	for _, s := range c.sizesFor(dt, 3) {
		// A residual network's stages: the channels double as the image halves, down
		// to 1×1 images in the last stages of small models; 3×3 and 1×1 kernels.
		ch := max(4, s/8)
		for i, hw := range []int{8, 4, 2, 1} {
			chs := ch << i
			x := ir.Type{DType: dt, Shape: ir.Shape{2, chs, hw, hw}}
			w3 := ir.Type{DType: dt, Shape: ir.Shape{chs, chs, 3, 3}}
			w1 := ir.Type{DType: dt, Shape: ir.Shape{chs, chs, 1, 1}}
			cases = append(cases, newCase(ir.OpConv2D, at, x, w3), newCase(ir.OpConv2D, one, x, w1))
		}
	}
	r, o := c.rateFit("conv2d "+dt.String(), cases)
	c.logf("conv rate %-4s            %8.3f GFLOP/s  fixed %6.2f µs", dt, r/1e9, o*1e6)
	return r, o
}

// vectorRate is the mean rate of the elementwise ops the models use most, by their
// op-table FLOPs, on tensors the size of tiny models' activations (meanRate).
func (c *calibrator) vectorRate(dt ir.DType) float64 {
	return c.meanRate("vector", dt, func(t, row ir.Type) []kernelCase {
		mask := ir.Type{DType: ir.Bool, Shape: t.Shape}
		return []kernelCase{newCase(ir.OpAdd, nil, t, t), newCase(ir.OpMul, nil, t, t),
			newCase(ir.OpSub, nil, t, t), newCase(ir.OpAdd, nil, t, row), newCase(ir.OpExp, nil, t),
			newCase(ir.OpGelu, nil, t), newCase(ir.OpRelu, nil, t),
			newCase(ir.OpSoftmax, ir.Attrs{}.With("axis", 1), t),
			newCase(ir.OpGt, nil, t, t), newCase(ir.OpWhere, nil, mask, t, t)}
	})
}

// reduceRate is the mean rate of the reductions and row normalizations the models use
// (meanRate): a transformer's along rows and columns, and a convolutional network's over
// the batch and the image of each channel (strided, several times slower per element).
func (c *calibrator) reduceRate(dt ir.DType) float64 {
	return c.meanRate("reduce", dt, func(t, row ir.Type) []kernelCase {
		img := ir.Type{DType: dt, Shape: ir.Shape{8, t.Shape[0] / 8, 4, 4}}
		nchw := ir.Attrs{}.With("axes", []int{0, 2, 3})
		return []kernelCase{newCase(ir.OpReduceSum, ir.Attrs{}.With("axes", []int{0}), t),
			newCase(ir.OpReduceSum, ir.Attrs{}.With("axes", []int{1}), t),
			newCase(ir.OpReduceMean, ir.Attrs{}.With("axes", []int{1}), t),
			newCase(ir.OpLayerNorm, ir.Attrs{}.With("eps", 1e-5), t, row, row),
			newCase(ir.OpCumsum, ir.Attrs{}.With("axis", 1), t),
			newCase(ir.OpReduceMean, nchw, img), newCase(ir.OpReduceSum, nchw, img)}
	})
}

// meanRate is the rate of the cases ops makes for each size (a [2s, 64] tensor and a row
// of 64): all their FLOPs over all their time less one overhead each. (A line through
// ops of different kinds would fit their differences, not a rate.)
func (c *calibrator) meanRate(class string, dt ir.DType, ops func(t, row ir.Type) []kernelCase) float64 {
	var flops, sec float64
	for _, s := range c.sizesFor(dt, 4) {
		t := ir.Type{DType: dt, Shape: ir.Shape{2 * s, 64}}
		row := ir.Type{DType: dt, Shape: ir.Shape{64}}
		for _, k := range ops(t, row) {
			tk := c.timeCase(k)
			c.logf("%s %-4s %-13s %8.2f µs  (%s)", class, dt, k.op.Def().Name, tk*1e6, k.out)
			flops, sec = flops+k.flops, sec+math.Max(tk-c.over, tk/4)
		}
	}
	r := flops / sec
	c.logf("%s rate %-4s          %8.3f GFLOP/s", class, dt, r/1e9)
	return r
}

// bandwidth is the rate at which the runtime's kernels move bytes where they compute
// nothing: bytes read and written over time less one kernel overhead each, over the
// layout ops of models (broadcast, transpose, slice, concat) on tensors of tiny models'
// sizes. This is what the roofline's memory term prices on this runtime (ops with FLOPs
// are bound by the vector rate here); its kernels walk tensors element by element, far
// below the streaming bandwidth of the memory.
func (c *calibrator) bandwidth() float64 {
	var bytes, sec float64
	for _, s := range c.sizes() {
		f32 := func(dims ...int) ir.Type { return ir.Type{DType: ir.F32, Shape: ir.Shape(dims)} }
		for _, k := range []kernelCase{
			newCase(ir.OpBroadcast, ir.Attrs{}.With("dims", []int{1}).With("shape", []int{8, s, 4, 4}), f32(s)),
			newCase(ir.OpTranspose, ir.Attrs{}.With("perm", []int{0, 2, 1}), f32(8, s, 16)),
			newCase(ir.OpSlice, ir.Attrs{}.With("start", []int{0, 0}).With("limit", []int{8, 16 * s}), f32(8, 32*s)),
			newCase(ir.OpConcat, ir.Attrs{}.With("axis", 1), f32(8, 8*s), f32(8, 8*s)),
		} {
			t := c.timeCase(k)
			c.logf("layout %-18s %8.2f µs  (%s)", k.op.Def().Name, t*1e6, k.out)
			bytes, sec = bytes+k.bytes, sec+math.Max(t-c.over, t/4)
		}
	}
	bw := bytes / sec
	c.logf("memory bandwidth          %8.3f GB/s  (layout kernels)", bw/1e9)
	return bw
}

// groupSizes are the sizes of the device groups the cluster's logical meshes make: powers
// of two up to n, and n.
func (c *calibrator) groupSizes() []int {
	var out []int
	for g := 2; g <= c.n; g *= 2 {
		out = append(out, g)
	}
	if len(out) == 0 || out[len(out)-1] != c.n && c.n > 1 {
		out = append(out, c.n)
	}
	if c.n < 2 {
		return nil
	}
	return out
}

// collectives fits α and β of each collective on each group size: the least-squares line
// through (bytes each device sends, seconds) over a few tensor sizes; α includes clock,
// the runtime's reading of its CPU clock around each communication.
func (c *calibrator) collectives(clock float64) []mesh.CollectiveFit {
	elems := []int{256, 4096, 65536}
	if c.quick {
		elems = []int{64, 1024}
	}
	var out []mesh.CollectiveFit
	for _, k := range []mesh.Collective{mesh.AllReduce, mesh.AllGather, mesh.ReduceScatter, mesh.AllToAll} {
		for _, g := range c.groupSizes() {
			var xs, ys []float64
			for _, e := range elems {
				B, sec := c.timeCollective(k, g, e)
				xs, ys = append(xs, mesh.BytesSent(k, g, B)), append(ys, sec)
			}
			alpha, beta := lineFit(xs, ys)
			alpha, beta = math.Max(alpha, 0)+clock, math.Max(beta, 0)
			c.logf("%-14s %d devices   α %8.2f µs  β %8.3f ns/B", k, g, alpha*1e6, beta*1e9)
			out = append(out, mesh.CollectiveFit{Kind: k, Devices: g, Alpha: alpha, Beta: beta})
		}
	}
	return out
}

// timeCollective times collective k on g devices of the in-process transport on f32
// tensors of g·e elements and returns B (mesh.SentFraction's) and the median seconds.
func (c *calibrator) timeCollective(k mesh.Collective, g, e int) (float64, float64) {
	group := make([]runtime.DeviceID, g)
	for i := range group {
		group[i] = runtime.DeviceID(i)
	}
	tr := runtime.NewInProc(group)
	// Gathers and scatters along the inner axis of 8 rows, as models split activations
	// (on the sequence or the hidden axis): the strided case, dearer than a flat one.
	rows, axis := 8, 1
	if e%rows != 0 || k == mesh.AllReduce {
		rows, axis = 1, 0
	}
	full := ir.Type{DType: ir.F32, Shape: ir.Shape{g * e}}
	local := ir.Type{DType: ir.F32, Shape: ir.Shape{e}}
	if axis == 1 {
		full = ir.Type{DType: ir.F32, Shape: ir.Shape{rows, g * e / rows}}
		local = ir.Type{DType: ir.F32, Shape: ir.Shape{rows, e / rows}}
	}
	B := float64(full.Bytes())
	in := full
	if k == mesh.AllGather || k == mesh.AllToAll {
		in = local // each device holds its block of the full tensor
	}
	if k == mesh.AllToAll {
		axis = 0
		in = ir.Type{DType: ir.F32, Shape: ir.Shape{g, max(1, e/g)}}
		B = float64(g) * float64(in.Bytes())
	}
	// Each worker cycles through copies of its operand, cold in the caches as in a
	// program (see timeCaseOn).
	copies := 1
	if !c.quick {
		copies = max(1, min(32, int(coldBytes/float64(in.Bytes()))))
	}
	xs := make([][]*kernels.Tensor, g)
	for i := range xs {
		for range copies {
			xs[i] = append(xs[i], kernels.New(in))
		}
	}
	next := make([]int, g)
	ctx := c.ctx
	late := g - 1
	if c.quick {
		late = -1 // sleeps take a millisecond on a loaded machine: too slow for a quick look
	}
	sec := c.timeStaggered(g, late, func(w int) error {
		self := group[w]
		x := xs[w][next[w]]
		next[w] = (next[w] + 1) % copies
		var err error
		switch k {
		case mesh.AllReduce:
			_, _, err = tr.AllReduce(ctx, self, group, x)
		case mesh.AllGather:
			_, _, err = tr.AllGather(ctx, self, group, axis, x)
		case mesh.ReduceScatter:
			_, _, err = tr.ReduceScatter(ctx, self, group, axis, x)
		case mesh.AllToAll:
			_, _, err = tr.AllToAll(ctx, self, group, 0, 1, x)
		}
		return err
	})
	return B, sec
}

// relativeLineFit is the line y = a + b·x of least squares relative to each y: the
// least-squares line through the points weighted by 1/y².
func relativeLineFit(xs, ys []float64) (a, b float64) {
	var sw, sx, sy, sxx, sxy float64
	for i := range xs {
		w := 1 / (ys[i] * ys[i])
		sw, sx, sy, sxx, sxy = sw+w, sx+w*xs[i], sy+w*ys[i], sxx+w*xs[i]*xs[i], sxy+w*xs[i]*ys[i]
	}
	d := sw*sxx - sx*sx
	if d == 0 || math.IsNaN(d) {
		return lineFit(xs, ys)
	}
	b = (sw*sxy - sx*sy) / d
	return (sy - b*sx) / sw, b
}

// lineFit is the least-squares line y = a + b·x.
func lineFit(xs, ys []float64) (a, b float64) {
	n := float64(len(xs))
	var sx, sy, sxx, sxy float64
	for i := range xs {
		sx, sy, sxx, sxy = sx+xs[i], sy+ys[i], sxx+xs[i]*xs[i], sxy+xs[i]*ys[i]
	}
	d := n*sxx - sx*sx
	if d == 0 {
		return sy / n, 0
	}
	b = (n*sxy - sx*sy) / d
	return (sy - b*sx) / n, b
}
