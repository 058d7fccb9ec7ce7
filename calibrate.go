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
//   - the FLOP rate of matmul, einsum and conv2d kernels in f32 and f16 (flops.matmul,
//     flops.conv): the slope of a least-squares line through their times at several sizes;
//   - the FLOP rate of vector work (flops.vector: exp, tanh, gelu, mul, softmax) on tensors
//     that stay in cache, and the memory bandwidth on adds of tensors that do not;
//   - the overhead of one instruction: a kernel on one element;
//   - α and β of each collective for each group size the cluster's meshes use (powers of
//     two up to the device count, and the count itself), on the in-process transport.
//
// Kernels run on one goroutine, so a rate is what a device sees computing alone; the
// cluster's host_cores says how many cores the devices share, and the sharding prices
// scale a mesh's kernels by how many of its devices compute at once (mesh.Cluster.Sharing).
// Collectives run on all their group's goroutines at once, as they do in the runtime.
// Times are medians of repeated rounds, so a busy machine skews them less.
func Calibrate(ctx context.Context, opts CalibrateOptions) (*mesh.Cluster, error) {
	if opts.Devices < 1 {
		return nil, fmt.Errorf("calibrate: devices must be at least 1, got %d", opts.Devices)
	}
	c, err := mesh.ParseCluster(fmt.Sprintf("cpu:%d", opts.Devices))
	if err != nil {
		return nil, err
	}
	cal := &calibrator{ctx: ctx, n: opts.Devices, quick: opts.Quick, report: opts.Report}
	c.Name = "cpu-calibrated"
	c.Efficiency = 1
	c.HostCores = goruntime.GOMAXPROCS(0)
	c.KernelOverhead = cal.overhead()
	c.FLOPs = &mesh.FLOPTable{
		Matmul: &mesh.Rates{F32: cal.matmulRate(ir.F32), F16: cal.matmulRate(ir.F16)},
		Conv:   &mesh.Rates{F32: cal.convRate(ir.F32), F16: cal.convRate(ir.F16)},
		Vector: &mesh.Rates{F32: cal.vectorRate(ir.F32), F16: cal.vectorRate(ir.F16)},
	}
	c.ContractionSpeedup = cal.speedup(c.HostCores)
	c.DeviceMemoryBandwidth = cal.bandwidth()
	c.DeviceFLOPS = c.FLOPs.Matmul.F32
	c.Collectives = cal.collectives()
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
	return 25 * time.Millisecond
}

func (c *calibrator) rounds() int {
	if c.quick {
		return 3
	}
	return 7
}

// timeConcurrent runs f on workers goroutines at once, each calling it in a loop, and
// returns the median over rounds of the seconds one call takes while all run.
func (c *calibrator) timeConcurrent(workers int, f func(w int) error) float64 {
	if c.err != nil || c.ctx.Err() != nil {
		return math.NaN()
	}
	// Size the loop so a round lasts about c.round().
	iters := 1
	for {
		t := c.once(workers, iters, f)
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
	for range c.rounds() {
		ts = append(ts, c.once(workers, iters, f)/float64(iters))
	}
	sort.Float64s(ts)
	return ts[len(ts)/2]
}

// once times iters calls of f on each of workers goroutines started together.
func (c *calibrator) once(workers, iters int, f func(w int) error) float64 {
	var wg sync.WaitGroup
	var mu sync.Mutex
	start := make(chan struct{})
	for w := range workers {
		wg.Go(func() {
			<-start
			for range iters {
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
	t0 := time.Now()
	close(start)
	wg.Wait()
	return time.Since(t0).Seconds()
}

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

// timeCase is the median seconds of one call of k on a device computing alone (gonum's
// Gemm may then use every core). Devices computing together share the cores, which the
// cluster's HostCores prices (mesh.Cluster.Sharing).
func (c *calibrator) timeCase(k kernelCase) float64 { return c.timeCaseOn(1, k) }

// timeCaseOn is the median seconds of one call of k on each of workers devices at once.
func (c *calibrator) timeCaseOn(workers int, k kernelCase) float64 {
	ins := make([][]*kernels.Tensor, workers)
	for w := range ins {
		for i, t := range k.args {
			x := kernels.New(t)
			for j := range x.Len() {
				x.Set(j, 0.5+float64((j*7+i)%13)/26)
			}
			ins[w] = append(ins[w], x)
		}
	}
	return c.timeConcurrent(workers, func(w int) error {
		_, err := kernels.Eval(k.op, k.at, k.out, ins[w])
		return err
	})
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
	c.logf("instruction overhead      %8.2f µs", c.over*1e6)
	return c.over
}

// rateFit times the cases and returns the FLOP rate of the least-squares line through
// (FLOPs, time): its inverse slope. A slope that is not positive (noise on a busy machine)
// falls back to the FLOPs of all cases over their time less the overhead.
func (c *calibrator) rateFit(what string, cases []kernelCase) float64 {
	var xs, ys []float64
	for _, k := range cases {
		t := c.timeCase(k)
		xs, ys = append(xs, k.flops), append(ys, t)
		c.logf("%-25s %8.2f µs  %7.3f GFLOP/s  (%s)", what, t*1e6, k.flops/t/1e9, k.out)
	}
	_, slope := lineFit(xs, ys)
	if !(slope > 0) {
		var f, t float64
		for i := range xs {
			f, t = f+xs[i], t+math.Max(ys[i]-c.over, ys[i]/2)
		}
		return f / t
	}
	return 1 / slope
}

// speedup is how much faster a device alone runs f32 matmuls than each of cores devices
// computing at once (one core each): their time together over their time alone, over
// model-sized matmuls, clamped to [1, cores].
func (c *calibrator) speedup(cores int) float64 {
	if cores <= 1 {
		return 1
	}
	var alone, shared float64
	for _, s := range c.sizes() {
		a := ir.Type{DType: ir.F32, Shape: ir.Shape{s, s}}
		k := newCase(ir.OpMatMul, nil, a, a)
		alone += c.timeCase(k)
		shared += c.timeCaseOn(cores, k)
	}
	sp := math.Min(float64(cores), math.Max(1, shared/alone))
	if math.IsNaN(sp) {
		sp = 1
	}
	c.logf("contraction speedup alone %8.2f× (%d cores)", sp, cores)
	return sp
}

func (c *calibrator) sizes() []int {
	if c.quick {
		return []int{16, 32}
	}
	return []int{32, 64, 128, 192}
}

func (c *calibrator) matmulRate(dt ir.DType) float64 {
	var cases []kernelCase
	for _, s := range c.sizes() {
		a := ir.Type{DType: dt, Shape: ir.Shape{s, s}}
		cases = append(cases, newCase(ir.OpMatMul, nil, a, a))
		// The einsums of a transformer, at batch 2, s/16 heads: a projection, its weight
		// gradient, attention scores and context (their operands permuted, as models have
		// them).
		h := max(1, s/16)
		x := ir.Type{DType: dt, Shape: ir.Shape{2, s, s}}
		heads := ir.Type{DType: dt, Shape: ir.Shape{2, s, h, 16}}
		probs := ir.Type{DType: dt, Shape: ir.Shape{2, h, s, s}}
		cases = append(cases,
			newCase(ir.OpEinsum, ir.Attrs{}.With("spec", "bsi,io->bso"), x, a),
			newCase(ir.OpEinsum, ir.Attrs{}.With("spec", "bsi,bso->io"), x, x),
			newCase(ir.OpEinsum, ir.Attrs{}.With("spec", "bqnd,bknd->bnqk"), heads, heads),
			newCase(ir.OpEinsum, ir.Attrs{}.With("spec", "bnqk,bknd->bqnd"), probs, heads))
	}
	r := c.rateFit("matmul/einsum "+dt.String(), cases)
	c.logf("matmul rate %-4s          %8.3f GFLOP/s", dt, r/1e9)
	return r
}

func (c *calibrator) convRate(dt ir.DType) float64 {
	at := ir.Attrs{}.With("stride", []int{1, 1}).With("pad", []int{1, 1})
	var cases []kernelCase
	for _, s := range c.sizes() {
		ch := max(4, s/8)
		x := ir.Type{DType: dt, Shape: ir.Shape{2, ch, 8, 8}}
		w := ir.Type{DType: dt, Shape: ir.Shape{ch, ch, 3, 3}}
		cases = append(cases, newCase(ir.OpConv2D, at, x, w))
	}
	r := c.rateFit("conv2d "+dt.String(), cases)
	c.logf("conv rate %-4s            %8.3f GFLOP/s", dt, r/1e9)
	return r
}

// vectorRate is the mean rate of the vector ops the models use most, by their op-table
// FLOPs, on tensors the size of tiny models' activations: all their FLOPs over all their
// time less one overhead each. (A line through ops of different kinds would fit their
// differences, not a rate.)
func (c *calibrator) vectorRate(dt ir.DType) float64 {
	var flops, sec float64
	for _, s := range c.sizes() {
		t := ir.Type{DType: dt, Shape: ir.Shape{2 * s, 64}}
		row := ir.Type{DType: dt, Shape: ir.Shape{64}}
		for _, k := range []kernelCase{newCase(ir.OpAdd, nil, t, t), newCase(ir.OpMul, nil, t, t),
			newCase(ir.OpSub, nil, t, t), newCase(ir.OpAdd, nil, t, row), newCase(ir.OpExp, nil, t),
			newCase(ir.OpGelu, nil, t), newCase(ir.OpRelu, nil, t),
			newCase(ir.OpSoftmax, ir.Attrs{}.With("axis", 1), t),
			newCase(ir.OpReduceSum, ir.Attrs{}.With("axes", []int{0}), t)} {
			tk := c.timeCase(k)
			c.logf("vector %-4s %-13s %8.2f µs  (%s)", dt, k.op.Def().Name, tk*1e6, k.out)
			flops, sec = flops+k.flops, sec+math.Max(tk-c.over, tk/4)
		}
	}
	r := flops / sec
	c.logf("vector rate %-4s          %8.3f GFLOP/s", dt, r/1e9)
	return r
}

// bandwidth is bytes read and written over time on adds of f32 tensors too big for cache.
func (c *calibrator) bandwidth() float64 {
	n := 1 << 20
	if c.quick {
		n = 1 << 16
	}
	t := ir.Type{DType: ir.F32, Shape: ir.Shape{n}}
	k := newCase(ir.OpAdd, nil, t, t)
	sec := c.timeCase(k)
	bw := k.bytes / math.Max(sec-c.over, sec/2)
	c.logf("memory bandwidth          %8.3f GB/s  (add of %s)", bw/1e9, t)
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
// through (bytes each device sends, seconds) over a few tensor sizes.
func (c *calibrator) collectives() []mesh.CollectiveFit {
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
			alpha, beta = math.Max(alpha, 0), math.Max(beta, 0)
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
	full := ir.Type{DType: ir.F32, Shape: ir.Shape{g * e}}
	local := ir.Type{DType: ir.F32, Shape: ir.Shape{e}}
	B := float64(full.Bytes())
	in := full
	if k == mesh.AllGather || k == mesh.AllToAll {
		in = local // each device holds its block of the full tensor
	}
	xs := make([]*kernels.Tensor, g)
	for i := range xs {
		xs[i] = kernels.New(in)
	}
	if k == mesh.AllToAll {
		block := ir.Type{DType: ir.F32, Shape: ir.Shape{g, max(1, e/g)}}
		B = float64(g) * float64(block.Bytes())
		for i := range xs {
			xs[i] = kernels.New(block)
		}
	}
	ctx := c.ctx
	sec := c.timeConcurrent(g, func(w int) error {
		self := group[w]
		var err error
		switch k {
		case mesh.AllReduce:
			_, _, err = tr.AllReduce(ctx, self, group, xs[w])
		case mesh.AllGather:
			_, _, err = tr.AllGather(ctx, self, group, 0, xs[w])
		case mesh.ReduceScatter:
			_, _, err = tr.ReduceScatter(ctx, self, group, 0, xs[w])
		case mesh.AllToAll:
			_, _, err = tr.AllToAll(ctx, self, group, 0, 1, xs[w])
		}
		return err
	})
	return B, sec
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
