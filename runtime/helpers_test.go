package runtime

import (
	"math/rand/v2"
	"testing"

	"go.uber.org/goleak"

	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/program"
	"github.com/autopar/autopar/runtime/kernels"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func typ(dt ir.DType, dims ...int) ir.Type { return ir.Type{DType: dt, Shape: ir.Shape(dims)} }

// random returns a tensor of normal values, the same for the same seed.
func random(t ir.Type, seed uint64) *kernels.Tensor {
	r := rand.New(rand.NewPCG(seed, 7))
	data := make([]float64, t.Shape.NumElements())
	for i := range data {
		data[i] = r.NormFloat64()
	}
	return kernels.FromF64(t.DType, t.Shape, data)
}

// builder writes a program instruction by instruction, declaring buffers as it goes.
type builder struct{ p *program.Program }

func newBuilder(d DeviceID) *builder { return &builder{p: &program.Program{Device: d}} }

// emit appends in; it defines no buffer.
func (b *builder) emit(in program.Instr) {
	in.Out = program.NoBuffer
	b.p.Instrs = append(b.p.Instrs, in)
}

// def emits in defining a new buffer of type t and returns it.
func (b *builder) def(name string, t ir.Type, in program.Instr) program.BufferID {
	in.Out = b.p.AddBuffer(name, t)
	b.p.Instrs = append(b.p.Instrs, in)
	return in.Out
}

func (b *builder) load(feed string, t ir.Type, off ...int) program.BufferID {
	if off == nil {
		off = make([]int, t.Shape.Rank())
	}
	return b.def(feed, t, program.Instr{Kind: program.Load, Name: feed, Offsets: off})
}

func (b *builder) compute(name string, t ir.Type, op ir.Op, at ir.Attrs, args ...program.BufferID) program.BufferID {
	return b.def(name, t, program.Instr{Kind: program.Compute, Op: op, Attrs: at, Args: args})
}

// store writes all of x as the result name.
func (b *builder) store(name string, x program.BufferID) {
	t := b.p.Buffers[x].Type
	b.emit(program.Instr{Kind: program.Store, Args: []program.BufferID{x}, Name: name,
		Offsets: make([]int, t.Shape.Rank()), Full: t})
}

func (b *builder) send(x program.BufferID, peer DeviceID, value string, mb int) {
	b.emit(program.Instr{Kind: program.Send, Args: []program.BufferID{x}, Peer: peer, Tag: program.Tag{Value: value, MicroBatch: mb}})
}

func (b *builder) recv(name string, t ir.Type, peer DeviceID, value string, mb int) program.BufferID {
	return b.def(name, t, program.Instr{Kind: program.Recv, Peer: peer, Tag: program.Tag{Value: value, MicroBatch: mb}})
}

func (b *builder) free(xs ...program.BufferID) {
	b.emit(program.Instr{Kind: program.Free, Args: xs})
}

func programs(bs []*builder) []*program.Program {
	ps := make([]*program.Program, len(bs))
	for i, b := range bs {
		ps[i] = b.p
	}
	return ps
}

func devices(n int) []DeviceID {
	ds := make([]DeviceID, n)
	for i := range ds {
		ds[i] = DeviceID(i)
	}
	return ds
}
