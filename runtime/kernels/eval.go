package kernels

import (
	"fmt"

	"github.com/autopar/autopar/ir"
)

// kernel fills out, a zeroed tensor of the checked result type, from args. Shapes and
// attributes have passed the op's shape rule when it runs, so it only reports errors that
// depend on values (an id out of range, an integer division by zero).
type kernel func(op ir.Op, at ir.Attrs, out *Tensor, args []*Tensor) error

// kernels is the kernel table, indexed by op; leaves (param, input, state) have none. Each
// file registers its own kernels, one per op (register refuses a second); a test checks
// that every other op of the ir table has one.
var kernels = make([]kernel, len(ir.AllOps())+1)

// register adds ks to the kernel table. It panics on an op registered twice: a programming
// error that fails every test at package initialization.
func register(ks map[ir.Op]kernel) bool {
	for op, k := range ks {
		if kernels[op] != nil {
			panic(fmt.Sprintf("kernels: %s is registered twice", op))
		}
		kernels[op] = k
	}
	return true
}

var _ = register(map[ir.Op]kernel{
	ir.OpConstant: evalConstant,
	ir.OpIota:     evalIota,
})

// Eval applies op with attributes at to args and returns a new tensor of type out, the type
// the op's shape rule inferred. It works for every non-leaf op of the ir table (constant
// and iota included), on whole tensors or on local shards alike: it re-runs the shape rule
// on the operands it is given, fills in default attributes, and returns an error, never
// panics, if an operand's storage does not match its dtype, the rule rejects the operands,
// or the rule's result differs from out. f16 and bf16 results are rounded to their
// precision before they are returned. The operands are never modified.
func Eval(op ir.Op, at ir.Attrs, out ir.Type, args []*Tensor) (*Tensor, error) {
	if storageOf(out.DType) == 0 {
		return nil, fmt.Errorf("%s: result type %s has an invalid dtype", op, out)
	}
	res := New(out)
	if err := EvalInto(op, at, res, args); err != nil {
		return nil, err
	}
	return res, nil
}

// EvalInto is Eval writing into out, a tensor of the result type that the caller owns and
// reuses: it saves the allocation (and the page faults of fresh memory) that dominate the
// memory-bound ops on large tensors. out is overwritten whole; it must not share storage
// with any operand. On error out's contents are unspecified.
func EvalInto(op ir.Op, at ir.Attrs, out *Tensor, args []*Tensor) error {
	k, err := lookup(op)
	if err != nil {
		return err
	}
	ia := make([]ir.Arg, len(args))
	for i, a := range args {
		if err := checkTensor(op, i, a); err != nil {
			return err
		}
		ia[i] = ir.Arg{Name: fmt.Sprintf("operand %d", i), Type: a.Type}
	}
	t, at, err := ir.InferType(op, ia, at)
	if err != nil {
		return err
	}
	if out == nil {
		return fmt.Errorf("%s: result tensor is nil", op)
	}
	if !t.Equal(out.Type) {
		return fmt.Errorf("%s: result type is %s but the operands give %s", op, out.Type, t)
	}
	if err := out.Check(); err != nil {
		return fmt.Errorf("%s: result: %w", op, err)
	}
	clear(out.F32) // kernels that accumulate (scatter_add, the gradients) start from zero
	clear(out.F64)
	clear(out.Int)
	if err := k(op, at, out, args); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	roundTo(out.Type.DType, out.F32)
	wrapTo(out.Type.DType, out.Int)
	return nil
}

func lookup(op ir.Op) (kernel, error) {
	if op <= ir.OpInvalid || int(op) >= len(kernels) {
		return nil, fmt.Errorf("op %d is not in the op table", uint8(op))
	}
	if op.IsLeaf() {
		return nil, fmt.Errorf("%s has no kernel: its value is fed, not computed", op)
	}
	if kernels[op] == nil {
		return nil, fmt.Errorf("%s: no kernel implemented", op)
	}
	return kernels[op], nil
}

// checkTensor verifies that operand i is present and holds what its type promises.
func checkTensor(op ir.Op, i int, a *Tensor) error {
	if a == nil {
		return fmt.Errorf("%s: operand %d is nil", op, i)
	}
	if err := a.Check(); err != nil {
		return fmt.Errorf("%s: operand %d: %w", op, i, err)
	}
	return nil
}

// evalConstant fills out with the value attribute, converted as Set converts.
func evalConstant(_ ir.Op, at ir.Attrs, out *Tensor, _ []*Tensor) error {
	v := at.Float("value")
	if out.Len() > 0 {
		out.Set(0, v)
	}
	switch {
	case out.F32 != nil:
		fill(out.F32, out.F32[0])
	case out.F64 != nil:
		fill(out.F64, out.F64[0])
	default:
		fill(out.Int, out.Int[0])
	}
	return nil
}

func fill[T number](d []T, v T) {
	for i := range d {
		d[i] = v
	}
}

// evalIota sets every element to its index along the axis attribute.
func evalIota(_ ir.Op, at ir.Attrs, out *Tensor, _ []*Tensor) error {
	s := out.Type.Shape
	ax := at.Int("axis")
	inner := int(ir.Shape(s[ax+1:]).NumElements())
	for i := range out.Len() {
		out.Set(i, float64(i/inner%s[ax]))
	}
	return nil
}
