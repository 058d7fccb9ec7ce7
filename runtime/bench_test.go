package runtime

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/program"
	"github.com/autopar/autopar/runtime/kernels"
)

// BenchmarkInstructionOverhead runs one device's program of many tiny computes (an add on
// one f32 element, then the free of its operand) and reports the cost per instruction,
// validation and setup included: what the runtime adds around a kernel.
func BenchmarkInstructionOverhead(b *testing.B) {
	for _, n := range []int{100, 1000, 10000} {
		b.Run(fmt.Sprintf("instrs=%d", 2*n+2), func(b *testing.B) {
			t := typ(ir.F32, 1)
			bl := newBuilder(0)
			one := bl.def("one", t, program.Instr{Kind: program.Constant, Value: 1})
			x := bl.def("x0", t, program.Instr{Kind: program.Constant, Value: 0})
			for i := range n {
				y := bl.compute(fmt.Sprintf("x%d", i+1), t, ir.OpAdd, nil, x, one)
				bl.free(x)
				x = y
			}
			progs := []*program.Program{bl.p}
			b.ResetTimer()
			for b.Loop() {
				if _, err := Run(context.Background(), progs, nil, Options{}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(bl.p.Instrs)), "ns/instr")
		})
	}
}

// BenchmarkAllReduce measures the in-process all-reduce: n goroutines, one per device, each
// reducing its own f32 tensor. Bytes per op is the tensor's size, so MB/s is the algorithm
// bandwidth (every device holds the sum of n tensors of that size after each op).
func BenchmarkAllReduce(b *testing.B) {
	for _, n := range []int{2, 4, 8} {
		for _, elems := range []int{1 << 10, 1 << 20} {
			b.Run(fmt.Sprintf("n=%d/elems=%d", n, elems), func(b *testing.B) {
				t := typ(ir.F32, elems)
				xs := make([]*kernels.Tensor, n)
				for d := range xs {
					xs[d] = random(t, uint64(d))
				}
				tr := NewInProc(devices(n))
				group := devices(n)
				b.SetBytes(t.Bytes())
				b.ResetTimer()
				allReduceLoop(b, tr, group, xs, b.N)
			})
		}
	}
}

func allReduceLoop(b *testing.B, tr *InProc, group []DeviceID, xs []*kernels.Tensor, iters int) {
	var wg sync.WaitGroup
	for d := range group {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range iters {
				if _, _, err := tr.AllReduce(context.Background(), group[d], group, xs[d]); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// BenchmarkDataParallelStep runs the weight-gradient step of y = x·w (two matmuls and a
// transpose) on the whole batch on one device, and split over 2 devices with an all-reduce
// of the gradient. gonum's gemm already spreads one product over GOMAXPROCS goroutines, so
// the one-device run uses every core too: run with -cpu 1 to see the serial kernels, and
// compare the two sub-benchmarks for what splitting the batch adds or saves.
func BenchmarkDataParallelStep(b *testing.B) {
	const rows, k, m = 512, 256, 256
	data := Data{"x": random(typ(ir.F32, rows, k), 1), "w": random(typ(ir.F32, k, m), 2)}
	for _, n := range []int{1, 2} {
		b.Run(fmt.Sprintf("devices=%d", n), func(b *testing.B) {
			progs := dataParallel(n, ir.F32, rows, k, m)
			for b.Loop() {
				if _, err := Run(context.Background(), progs, data, Options{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
