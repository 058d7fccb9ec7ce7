package kernels

import (
	"fmt"
	"testing"

	"github.com/autopar/autopar/ir"
)

// benchEval times one op on fixed random operands; setup is outside the timer.
func benchEval(b *testing.B, op ir.Op, at ir.Attrs, args ...*Tensor) {
	b.Helper()
	ia := make([]ir.Arg, len(args))
	for i, a := range args {
		ia[i] = ir.Arg{Name: "x", Type: a.Type}
	}
	out, at, err := ir.InferType(op, ia, at)
	if err != nil {
		b.Fatal(err)
	}
	flops := op.Def().FLOPs(argTypes(args), at, out)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := Eval(op, at, out, args); err != nil {
			b.Fatal(err)
		}
	}
	if flops > 0 {
		b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
	}
}

// benchEvalInto is benchEval reusing one result tensor.
func benchEvalInto(b *testing.B, op ir.Op, at ir.Attrs, args ...*Tensor) {
	b.Helper()
	ia := make([]ir.Arg, len(args))
	for i, a := range args {
		ia[i] = ir.Arg{Name: "x", Type: a.Type}
	}
	out, at, err := ir.InferType(op, ia, at)
	if err != nil {
		b.Fatal(err)
	}
	res := New(out)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if err := EvalInto(op, at, res, args); err != nil {
			b.Fatal(err)
		}
	}
}

func argTypes(args []*Tensor) []ir.Type {
	ts := make([]ir.Type, len(args))
	for i, a := range args {
		ts[i] = a.Type
	}
	return ts
}

func BenchmarkMatMul(b *testing.B) {
	for _, dt := range []ir.DType{ir.F32, ir.F64} {
		for _, n := range []int{64, 128, 256, 512, 1024} {
			b.Run(fmt.Sprintf("%s/n=%d", dt, n), func(b *testing.B) {
				r := rngFor(1)
				benchEval(b, ir.OpMatMul, nil, randT(r, typ(dt, n, n)), randT(r, typ(dt, n, n)))
			})
		}
	}
}

// BenchmarkEinsum times the contractions of a transformer layer: a batched projection and
// attention scores, which go through transposes and batched gemm.
func BenchmarkEinsum(b *testing.B) {
	cases := []struct {
		spec   string
		shapes [][]int
	}{
		{"bsi,io->bso", [][]int{{8, 128, 256}, {256, 256}}},
		{"bqnd,bknd->bnqk", [][]int{{8, 128, 4, 64}, {8, 128, 4, 64}}},
	}
	for _, c := range cases {
		b.Run(c.spec, func(b *testing.B) {
			r := rngFor(2)
			var args []*Tensor
			for _, s := range c.shapes {
				args = append(args, randT(r, typ(ir.F32, s...)))
			}
			benchEval(b, ir.OpEinsum, ir.Attrs{}.With("spec", c.spec), args...)
		})
	}
}

func BenchmarkConv2D(b *testing.B) {
	cases := []struct{ n, c, hw, o, k int }{{8, 16, 32, 32, 3}, {8, 64, 16, 64, 3}, {8, 128, 8, 128, 1}}
	for _, c := range cases {
		at := ir.Attrs{}.With("stride", []int{1, 1}).With("pad", []int{c.k / 2, c.k / 2})
		name := fmt.Sprintf("n=%d/c=%d/hw=%d/o=%d/k=%d", c.n, c.c, c.hw, c.o, c.k)
		r := rngFor(3)
		x, f := randT(r, typ(ir.F32, c.n, c.c, c.hw, c.hw)), randT(r, typ(ir.F32, c.o, c.c, c.k, c.k))
		b.Run("fwd/"+name, func(b *testing.B) { benchEval(b, ir.OpConv2D, at, x, f) })
		dy := randT(r, typ(ir.F32, c.n, c.o, c.hw, c.hw))
		b.Run("input_grad/"+name, func(b *testing.B) {
			benchEval(b, ir.OpConv2DInputGrad, at.With("shape", []int(x.Type.Shape)), dy, f)
		})
		b.Run("filter_grad/"+name, func(b *testing.B) {
			benchEval(b, ir.OpConv2DFilterGrad, at.With("kernel", []int{c.k, c.k}), x, dy)
		})
	}
}

// BenchmarkElementwise times a broadcasting add (bias) and softmax rows, the memory-bound
// ops around the contractions.
func BenchmarkElementwise(b *testing.B) {
	r := rngFor(4)
	x := randT(r, typ(ir.F32, 1024, 1024))
	bias := randT(r, typ(ir.F32, 1024))
	b.Run("add_bias", func(b *testing.B) { benchEval(b, ir.OpAdd, nil, x, bias) })
	b.Run("add_bias/into", func(b *testing.B) { benchEvalInto(b, ir.OpAdd, nil, x, bias) })
	b.Run("softmax", func(b *testing.B) { benchEval(b, ir.OpSoftmax, ir.Attrs{}.With("axis", 1), x) })
	b.Run("reduce_sum_axis0", func(b *testing.B) { benchEval(b, ir.OpReduceSum, ir.Attrs{}.With("axes", []int{0}), x) })
	b.Run("transpose", func(b *testing.B) { benchEval(b, ir.OpTranspose, ir.Attrs{}.With("perm", []int{1, 0}), x) })
	b.Run("transpose/into", func(b *testing.B) { benchEvalInto(b, ir.OpTranspose, ir.Attrs{}.With("perm", []int{1, 0}), x) })
}
