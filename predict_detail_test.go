package autopar

import (
	"context"
	"flag"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/mesh"
	"github.com/autopar/autopar/passes/sharding"
	"github.com/autopar/autopar/program"
)

var detailFlag = flag.String("predict-detail", "", "model/devices/plan (e.g. gpt-tiny/1/search): TestPredictDetail prints measured against priced time per instruction kind and op")

// TestPredictDetail is a diagnostic: it runs one case of BenchmarkPredictedVsMeasured with
// a trace and prints, per instruction kind and op, the wall time the instructions took
// (device 0, median over steps) beside their roofline price on the cluster.
func TestPredictDetail(t *testing.T) {
	if *detailFlag == "" {
		t.Skip("-predict-detail model/devices/plan")
	}
	parts := strings.Split(*detailFlag, "/")
	require.Len(t, parts, 3)
	n, err := strconv.Atoi(parts[1])
	require.NoError(t, err)
	c := predictCase{parts[0], n, parts[2]}
	opts, _ := c.options()
	var cl *mesh.Cluster
	for _, path := range strings.Split(*calibratedFlag, ",") {
		x, err := mesh.LoadCluster(path)
		require.NoError(t, err)
		if x.DevicesPerHost == n {
			cl = x
		}
	}
	require.NotNil(t, cl)
	p, err := Compile(context.Background(), model(t, c.model), cl, opts)
	require.NoError(t, err)
	ctx := context.Background()
	tr, err := NewTrainer(ctx, p, TrainerOptions{Seed: 1, CPUTime: true})
	require.NoError(t, err)
	batch := stepBatch(t, p.Forward(), 1)
	for range 3 {
		_, err := tr.Step(ctx, batch)
		require.NoError(t, err)
	}
	type agg struct {
		count int
		meas  []time.Duration
		price float64
		flops float64
		bytes float64
	}
	groups := map[string]*agg{}
	const steps = 7
	progs := tr.progs
	var cpu, wall []float64
	for s := range steps {
		tr.TraceNext()
		_, err := tr.Step(ctx, batch)
		require.NoError(t, err)
		m, err := tr.Measured()
		require.NoError(t, err)
		cpu, wall = append(cpu, m.CPUStep), append(wall, m.Step)
		sums := map[string]time.Duration{}
		for _, e := range tr.LastResult().Trace {
			if e.Device != 0 {
				continue
			}
			in := &progs[0].Instrs[e.Index]
			k := detailKey(progs[0], in)
			sums[k] += e.CPU
			if s == 0 {
				a := groups[k]
				if a == nil {
					a = &agg{}
					groups[k] = a
				}
				a.count++
				a.price += instrPrice(cl, progs[0], in)
				f, by := instrWork(progs[0], in)
				a.flops += f
				a.bytes += by
			}
		}
		for k, d := range sums {
			groups[k].meas = append(groups[k].meas, d)
		}
	}
	var keys []string
	for k := range groups {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return groups[keys[i]].price > groups[keys[j]].price })
	var tm, tp float64
	for _, k := range keys {
		a := groups[k]
		m := medianDur(a.meas).Seconds()
		tm += m
		tp += a.price
		net := m - float64(a.count)*(cl.KernelOverhead+*clockFlag*1e-6)
		t.Logf("%-28s %5d  measured %9.1f µs  priced %9.1f µs  ratio %5.2f  per instr %6.2f µs  net rate %7.3f GFLOP/s %7.3f GB/s", k, a.count, m*1e6, a.price*1e6, m/a.price, m/float64(a.count)*1e6, a.flops/net/1e9, a.bytes/net/1e9)
	}
	t.Logf("total measured %.3f ms priced %.3f ms (plan predicted %.3f ms); step: cpu %.3f ms, wall %.3f ms; %d instructions on device 0",
		tm*1e3, tp*1e3, p.Predicted.StepTime*1e3, median(cpu)*1e3, median(wall)*1e3, tr.LastResult().Devices[0].Instrs)
}

var clockFlag = flag.Float64("predict-detail-clock", 0.5, "µs the clock reads add to each instruction's CPU time in TestPredictDetail")

// instrTypes is the types of an instruction's operands and result (the zero type when it
// has none) and the bytes they hold together.
func instrTypes(p *program.Program, in *program.Instr) (args []ir.Type, out ir.Type, bytes float64) {
	for _, a := range in.Args {
		args = append(args, p.Buffers[a].Type)
		bytes += float64(p.Buffers[a].Type.Bytes())
	}
	if in.Out != program.NoBuffer {
		out = p.Buffers[in.Out].Type
		bytes += float64(out.Bytes())
	}
	return args, out, bytes
}

func instrWork(p *program.Program, in *program.Instr) (flops, bytes float64) {
	args, out, bytes := instrTypes(p, in)
	if in.Kind == program.Compute {
		flops = in.Op.Def().FLOPs(args, in.Attrs, out)
	}
	return flops, bytes
}

func medianDur(ds []time.Duration) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	if len(s) == 0 {
		return 0
	}
	return s[(len(s)-1)/2]
}

func detailKey(p *program.Program, in *program.Instr) string {
	if in.Kind == program.Compute {
		k := "compute " + in.Op.String()
		if in.Op == ir.OpEinsum {
			k += " " + fmt.Sprint(in.Attrs.String("spec"))
		}
		return k
	}
	return in.Kind.String()
}

// instrPrice is the roofline of one instruction as the plan prices it: a compute as the
// sharding pass prices its op (sharding.OpClass), the data instructions as dataTime does
// (a load or store moves its block in and out, a constant writes its buffer, an
// accumulation is an add), collectives and frees at nothing (priced by their fits, and in
// the instruction whose result is freed).
func instrPrice(c *mesh.Cluster, p *program.Program, in *program.Instr) float64 {
	args, out, bytes := instrTypes(p, in)
	switch in.Kind {
	case program.Compute:
		class := sharding.OpClass(in.Op, in.Op.Def().Dims(args, in.Attrs, out))
		dt := out.DType
		if len(args) > 0 {
			dt = args[0].DType
		}
		return c.OpTime(class, precision(dt), in.Op.Def().FLOPs(args, in.Attrs, out), bytes)
	case program.Load, program.Store:
		return c.OpTime(mesh.ClassVector, mesh.F32, 0, 2*bytes)
	case program.Constant:
		return c.OpTime(mesh.ClassVector, mesh.F32, 0, bytes)
	case program.Accumulate:
		t := args[0]
		return c.OpTime(mesh.ClassVector, precision(t.DType), float64(t.Shape.NumElements()), 3*float64(t.Bytes()))
	}
	return 0
}

// TestPredictedStepPricesEveryInstruction: on one device, a plan's predicted step is its
// programs' instructions priced one by one (instrPrice), each block as often as the
// schedule runs it: the stage prices hold every kernel and every data instruction codegen
// emits, once. The plan's own price differs only where it prices what the programs do
// not run (the mean over the micro-batches' factor at B = 1; none here).
func TestPredictedStepPricesEveryInstruction(t *testing.T) {
	for _, name := range []string{"mlp-tiny", "gpt-tiny"} {
		t.Run(name, func(t *testing.T) {
			c := cluster(t, "cpu:1")
			p := compile(t, model(t, name), c, Options{Microbatches: 2})
			progs, err := p.Programs()
			require.NoError(t, err)
			require.Len(t, progs, 1)
			prog := progs[0]
			sum := 0.0
			for _, b := range prog.Blocks {
				n := 1.0
				if b.PerMicrobatch {
					n = float64(p.Microbatches)
				}
				for i := b.Start; i < b.End; i++ {
					sum += n * instrPrice(c, prog, &prog.Instrs[i])
				}
			}
			assert.InEpsilon(t, sum, p.Predicted.StepTime, 0.005, "the programs' instructions priced one by one: %.4g s; the plan: %.4g s", sum, p.Predicted.StepTime)
		})
	}
}
