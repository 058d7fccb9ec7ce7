package zoo

import (
	"fmt"

	"github.com/autopar/autopar/frontend"
	"github.com/autopar/autopar/ir"
)

// MLP is a classifier of Layers hidden layers (matmul, bias, relu) and a linear output
// layer, trained with the mean sparse cross-entropy: the smallest model that has every
// kind of op the sharding pass must handle (contraction, elementwise, reduction, loss).
type MLP struct {
	Layers, Hidden, Batch, In, Classes int
	DType                              string
}

// NewMLP returns the tiny default config: 2 hidden layers of 32, batch 16, 16 inputs,
// 10 classes.
func NewMLP() *MLP {
	return &MLP{Layers: 2, Hidden: 32, Batch: 16, In: 16, Classes: 10, DType: "f32"}
}

// Name returns "mlp".
func (m *MLP) Name() string { return "mlp" }

// Params lists the knobs.
func (m *MLP) Params() []Param {
	return []Param{
		intParam("layers", "number of hidden layers", &m.Layers),
		intParam("hidden", "hidden layer width", &m.Hidden),
		intParam("batch", "batch size", &m.Batch),
		intParam("in", "input features", &m.In),
		intParam("classes", "output classes", &m.Classes),
		stringParam("dtype", "dtype of params and activations (f32, f16, bf16)", &m.DType),
	}
}

// Build makes the forward graph; its output is the scalar loss.
func (m *MLP) Build() (*ir.Graph, error) {
	k := &knobs{model: "mlp"}
	k.positive("batch", m.Batch, "in", m.In, "classes", m.Classes, "hidden", m.Hidden)
	if m.Layers < 0 {
		k.fail("layers must be at least 0, got %d", m.Layers)
	}
	dt := k.dtype(m.DType)
	if k.err != nil {
		return nil, k.err
	}
	b := frontend.NewBuilder("mlp")
	x := b.Input("x", dt, ir.Shape{m.Batch, m.In}, 0)
	y := b.Input("y", ir.I32, ir.Shape{m.Batch}, 0, frontend.Limit(m.Classes))
	for i := 0; i < m.Layers; i++ {
		s := b.Scope(fmt.Sprintf("l%d", i)).Block(i + 1)
		x = s.Named("relu").Relu(dense(s, x, "fc", m.Hidden, dt))
	}
	logits := dense(b, x, "logits", m.Classes, dt)
	loss := b.Named("loss").ReduceMean(b.Named("ce").SparseCrossEntropy(logits, y), 0)
	b.Output(loss)
	return b.Build()
}
