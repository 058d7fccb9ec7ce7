package frontend

import "github.com/autopar/autopar/ir"

// Option sets an optional attribute of a declaration: Init for params, Limit for integer
// inputs. An option the op does not take records an error naming the attributes it takes.
type Option struct {
	name  string
	value any
}

// Init says how the interpreter initializes a param: "normal" (the default, scaled by
// fan-in), "zeros" or "ones".
func Init(kind string) Option { return Option{"init", kind} }

// Zeros initializes a param to zeros (biases, layer-norm shifts).
var Zeros = Init("zeros")

// Ones initializes a param to ones (layer-norm and batch-norm scales).
var Ones = Init("ones")

// Limit bounds the generated data of an integer input to [0, n): labels, token ids.
func Limit(n int) Option { return Option{"limit", n} }

func (b *Builder) declare(op ir.Op, name string, t ir.Type, batch int, opts []Option) Value {
	at := ir.Attrs{}.With("type", t)
	if op == ir.OpInput {
		at = at.With("batch", batch)
	}
	for _, o := range opts {
		at = at.With(o.name, o.value)
	}
	return b.Named(name).Apply(op, at)
}

// Input declares a data input of the given type. batch is its batch dim, -1 for none.
func (b *Builder) Input(name string, dt ir.DType, shape ir.Shape, batch int, opts ...Option) Value {
	return b.declare(ir.OpInput, name, ir.Type{DType: dt, Shape: shape.Clone()}, batch, opts)
}

// Param declares a trained parameter.
func (b *Builder) Param(name string, dt ir.DType, shape ir.Shape, opts ...Option) Value {
	return b.declare(ir.OpParam, name, ir.Type{DType: dt, Shape: shape.Clone()}, -1, opts)
}

// State declares optimizer state (zeros at the start).
func (b *Builder) State(name string, dt ir.DType, shape ir.Shape) Value {
	return b.declare(ir.OpState, name, ir.Type{DType: dt, Shape: shape.Clone()}, -1, nil)
}

// Constant makes a tensor of the given type filled with value.
func (b *Builder) Constant(value float64, dt ir.DType, shape ir.Shape) Value {
	t := ir.Type{DType: dt, Shape: shape.Clone()}
	return b.Apply(ir.OpConstant, ir.Attrs{}.With("value", value).With("type", t))
}

// Scalar makes a 0-D constant, for scaling and for broadcasting against any tensor.
func (b *Builder) Scalar(value float64, dt ir.DType) Value {
	return b.Constant(value, dt, ir.Shape{})
}

// Iota makes a tensor whose elements are their index along axis: the building block of
// masks (causal attention) and one-hots.
func (b *Builder) Iota(dt ir.DType, shape ir.Shape, axis int) Value {
	t := ir.Type{DType: dt, Shape: shape.Clone()}
	return b.Apply(ir.OpIota, ir.Attrs{}.With("axis", axis).With("type", t))
}
