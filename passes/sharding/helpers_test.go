package sharding

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/mesh"
)

// gb builds graphs in tests; every mistake fails the test.
type gb struct {
	t     testing.TB
	g     *ir.Graph
	block ir.Block // of what it makes
}

func newGB(t testing.TB, name string) *gb { return &gb{t: t, g: ir.NewGraph(name)} }

func f32(shape ...int) ir.Type { return ir.Type{DType: ir.F32, Shape: ir.Shape(shape)} }

func (b *gb) declare(op ir.Op, name string, t ir.Type, batch int) ir.ValueID {
	b.t.Helper()
	id, err := b.g.Declare(op, name, t, batch, ir.Pos{})
	require.NoError(b.t, err)
	b.g.Value(id).Block = b.block
	return id
}

func (b *gb) param(name string, shape ...int) ir.ValueID {
	return b.declare(ir.OpParam, name, f32(shape...), -1)
}

func (b *gb) input(name string, shape ...int) ir.ValueID {
	return b.declare(ir.OpInput, name, f32(shape...), 0)
}

func (b *gb) op(op ir.Op, name string, at ir.Attrs, args ...ir.ValueID) ir.ValueID {
	b.t.Helper()
	id, err := b.g.Append(op, b.g.FreshName(name), args, at, ir.Pos{})
	require.NoError(b.t, err)
	b.g.Value(id).Block = b.block
	return id
}

// in returns b making values in block n (0: none).
func (b *gb) in(n int) *gb {
	c := *b
	c.block = ir.Block(n)
	return &c
}

func (b *gb) scalar(name string, v float64) ir.ValueID {
	return b.op(ir.OpConstant, name, ir.Attrs{}.With("value", v).With("type", f32()))
}

func (b *gb) transpose(name string, x ir.ValueID) ir.ValueID {
	return b.op(ir.OpTranspose, name, ir.Attrs{}.With("perm", []int{1, 0}), x)
}

// mlpStep builds the SGD training step of an L-layer MLP by hand (forward, loss, backward,
// update), the graph passes.TrainingStep would make: x[B,H] → (matmul w_i, relu)* → mean
// squared error against y. Layer i's values are in block i (named "l<i>.…" and their
// gradients "grad.l<i>.…", for people). x needs no gradient.
func mlpStep(t testing.TB, batch, hidden, layers int) *ir.Graph {
	b := newGB(t, fmt.Sprintf("mlp%d", layers))
	x := b.input("x", batch, hidden)
	y := b.input("y", batch, hidden)
	w := make([]ir.ValueID, layers+1)
	for i := 1; i <= layers; i++ {
		w[i] = b.in(i).param(fmt.Sprintf("l%d.w", i), hidden, hidden)
	}
	h := make([]ir.ValueID, layers+1) // h[i]: input of layer i+1
	z := make([]ir.ValueID, layers+1)
	h[0] = x
	for i := 1; i <= layers; i++ {
		z[i] = b.in(i).op(ir.OpMatMul, fmt.Sprintf("l%d.z", i), nil, h[i-1], w[i])
		if i < layers {
			h[i] = b.in(i).op(ir.OpRelu, fmt.Sprintf("l%d.h", i), nil, z[i])
		}
	}
	d := b.op(ir.OpSub, "d", nil, z[layers], y)
	sq := b.op(ir.OpMul, "sq", nil, d, d)
	loss := b.op(ir.OpReduceMean, "loss", ir.Attrs{}.With("axes", []int{0, 1}), sq)
	b.g.AddOutput(loss, ir.Pos{})
	dz := b.op(ir.OpMul, "grad.out", nil, d, b.scalar("two_over_n", 2/float64(batch*hidden)))
	zero, lr := b.scalar("zero", 0), b.scalar("lr", 0.1)
	for i := layers; i >= 1; i-- {
		bi, bp := b.in(i), b.in(i-1)
		dw := bi.op(ir.OpMatMul, fmt.Sprintf("grad.l%d.w", i), nil, bi.transpose(fmt.Sprintf("l%d.in_t", i), h[i-1]), dz)
		step := bi.op(ir.OpMul, fmt.Sprintf("l%d.step", i), nil, dw, lr)
		nw := bi.op(ir.OpSub, fmt.Sprintf("l%d.w_new", i), nil, w[i], step)
		b.g.AddUpdate(w[i], nw, ir.Pos{})
		if i == 1 {
			break
		}
		dh := bp.op(ir.OpMatMul, fmt.Sprintf("grad.l%d.h", i-1), nil, dz, bi.transpose(fmt.Sprintf("l%d.w_t", i), w[i]))
		mask := bp.op(ir.OpGt, fmt.Sprintf("l%d.mask", i-1), nil, z[i-1], zero)
		maskf := bp.op(ir.OpCast, fmt.Sprintf("l%d.maskf", i-1), ir.Attrs{}.With("to", ir.F32), mask)
		dz = bp.op(ir.OpMul, fmt.Sprintf("grad.l%d.z", i-1), nil, dh, maskf)
	}
	require.NoError(t, ir.Verify(b.g))
	return b.g
}

func uniform(t testing.TB, n0, n1 int) *mesh.LogicalMesh {
	t.Helper()
	m, err := mesh.NewUniformMesh(n0, n1, 1, 1)
	require.NoError(t, err)
	return m
}

func lookup(t testing.TB, g *ir.Graph, name string) ir.ValueID {
	t.Helper()
	id, ok := g.Lookup(name)
	require.True(t, ok, "no value %s", name)
	return id
}

// bigCollectives drops the collectives of scalars (the loss's own reduction), which every
// plan that splits the batch pays and the known answers do not count.
func bigCollectives(g *ir.Graph, r *Result) []Collective {
	var out []Collective
	for _, c := range r.Collectives {
		if g.Value(c.Value).Type.Shape.Rank() > 0 {
			out = append(out, c)
		}
	}
	return out
}

func describe(g *ir.Graph, cs []Collective) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = fmt.Sprintf("%s %s axes %s B=%g", g.Value(c.Value).Name, c.Kind, c.Axes.Digits(), c.Bytes)
		if c.Consumer != ir.NoValue {
			out[i] += " -> " + g.Value(c.Consumer).Name
		}
	}
	return out
}
