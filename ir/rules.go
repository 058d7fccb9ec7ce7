package ir

import (
	"fmt"
	"slices"
)

// This file holds the shape rules the op table points at. Each returns the result type or an
// error that names the op and the operand at fault.

func errf(op, format string, args ...any) error {
	return fmt.Errorf("%s: "+format, append([]any{op}, args...)...)
}

// sameDType checks that every operand has the dtype of the first.
func sameDType(op string, args []Arg) error {
	for _, a := range args[1:] {
		if a.Type.DType != args[0].Type.DType {
			return errf(op, "dtypes differ: %s is %s but %s is %s", args[0].Name, args[0].Type, a.Name, a.Type)
		}
	}
	return nil
}

func wantFloat(op string, a Arg) error {
	if !a.Type.DType.IsFloat() {
		return errf(op, "%s must be a float tensor, is %s", a.Name, a.Type)
	}
	return nil
}

func wantInt(op string, a Arg) error {
	if !a.Type.DType.IsInt() {
		return errf(op, "%s must be an integer tensor, is %s", a.Name, a.Type)
	}
	return nil
}

func wantRank(op string, a Arg, rank int) error {
	if a.Type.Shape.Rank() != rank {
		return errf(op, "%s must be %d-D, is %s", a.Name, rank, a.Type)
	}
	return nil
}

func wantAxis(op string, a Arg, axis int) error {
	if axis < 0 || axis >= a.Type.Shape.Rank() {
		return errf(op, "axis %d is out of range for %s of type %s", axis, a.Name, a.Type)
	}
	return nil
}

// broadcastShape applies numpy broadcasting: shapes align on the right, and a dim of size 1
// stretches to match.
func broadcastShape(op string, args []Arg) (Shape, error) {
	rank := 0
	for _, a := range args {
		rank = max(rank, a.Type.Shape.Rank())
	}
	out := make(Shape, rank)
	for i := range out {
		out[i] = 1
	}
	for _, a := range args {
		s := a.Type.Shape
		for i, d := range s {
			j := rank - len(s) + i
			switch {
			case d == out[j] || d == 1:
			case out[j] == 1:
				out[j] = d
			default:
				return nil, errf(op, "shapes do not broadcast: %s", describeArgs(args))
			}
		}
	}
	return out, nil
}

func describeArgs(args []Arg) string {
	s := ""
	for i, a := range args {
		switch {
		case i == len(args)-1 && i > 0:
			s += " and "
		case i > 0:
			s += ", "
		}
		s += a.Name + " is " + a.Type.String()
	}
	return s
}

func inferLeaf(args []Arg, at Attrs) (Type, error) {
	t := at.Type("type")
	if err := validType("declaration", t); err != nil {
		return Type{}, err
	}
	if b, ok := at.Get("batch"); ok && b.(int) != -1 {
		if b.(int) < 0 || b.(int) >= t.Shape.Rank() {
			return Type{}, errf("input", "batch dim %d is out of range for %s", b.(int), t)
		}
	}
	if l, ok := at.Get("limit"); ok && l.(int) != 0 && (l.(int) < 0 || !t.DType.IsInt()) {
		return Type{}, errf("input", "limit bounds integer data and must be positive, got %d for %s", l.(int), t)
	}
	if in, ok := at.Get("init"); ok {
		switch in.(string) {
		case "normal", "zeros", "ones":
		default:
			return Type{}, errf("param", "init must be \"normal\", \"zeros\" or \"ones\", got %q", in)
		}
	}
	return t, nil
}

func validType(op string, t Type) error {
	if t.DType == Invalid {
		return errf(op, "type has no dtype")
	}
	for _, d := range t.Shape {
		if d <= 0 {
			return errf(op, "type %s has a dim that is not positive", t)
		}
	}
	return nil
}

func inferConstant(args []Arg, at Attrs) (Type, error) {
	t := at.Type("type")
	return t, validType("constant", t)
}

func inferIota(args []Arg, at Attrs) (Type, error) {
	t := at.Type("type")
	if err := validType("iota", t); err != nil {
		return Type{}, err
	}
	if t.DType == Bool {
		return Type{}, errf("iota", "type must be numeric, is %s", t)
	}
	ax := at.Int("axis")
	if ax < 0 || ax >= t.Shape.Rank() {
		return Type{}, errf("iota", "axis %d is out of range for %s", ax, t)
	}
	return t, nil
}

// inferArith is the rule of add, sub, mul, div, max: same dtypes, numeric, broadcast.
func inferArith(name string) func([]Arg, Attrs) (Type, error) {
	return func(args []Arg, _ Attrs) (Type, error) {
		if err := sameDType(name, args); err != nil {
			return Type{}, err
		}
		if args[0].Type.DType == Bool {
			return Type{}, errf(name, "%s must be numeric, is %s", args[0].Name, args[0].Type)
		}
		s, err := broadcastShape(name, args)
		return Type{args[0].Type.DType, s}, err
	}
}

func inferCompare(name string) func([]Arg, Attrs) (Type, error) {
	return func(args []Arg, _ Attrs) (Type, error) {
		if err := sameDType(name, args); err != nil {
			return Type{}, err
		}
		s, err := broadcastShape(name, args)
		return Type{Bool, s}, err
	}
}

func inferWhere(args []Arg, _ Attrs) (Type, error) {
	if args[0].Type.DType != Bool {
		return Type{}, errf("where", "condition %s must be bool, is %s", args[0].Name, args[0].Type)
	}
	if err := sameDType("where", args[1:]); err != nil {
		return Type{}, err
	}
	s, err := broadcastShape("where", args)
	return Type{args[1].Type.DType, s}, err
}

// inferUnaryFloat is the rule of exp, log, tanh and the other float-only maps.
func inferUnaryFloat(name string) func([]Arg, Attrs) (Type, error) {
	return func(args []Arg, _ Attrs) (Type, error) {
		return args[0].Type, wantFloat(name, args[0])
	}
}

func inferNeg(args []Arg, _ Attrs) (Type, error) {
	if args[0].Type.DType == Bool {
		return Type{}, errf("neg", "%s must be numeric, is %s", args[0].Name, args[0].Type)
	}
	return args[0].Type, nil
}

func inferCast(args []Arg, at Attrs) (Type, error) {
	to := at.DType("to")
	if to == Invalid {
		return Type{}, errf("cast", "to must name a dtype")
	}
	return Type{to, args[0].Type.Shape}, nil
}

func inferDropout(args []Arg, at Attrs) (Type, error) {
	if r := at.Float("rate"); !(r >= 0 && r < 1) {
		return Type{}, errf("dropout", "rate must be in [0, 1), got %s", formatFloat(r))
	}
	return args[0].Type, wantFloat("dropout", args[0])
}

func inferMatMul(args []Arg, _ Attrs) (Type, error) {
	a, b := args[0], args[1]
	for _, x := range args {
		if err := wantRank("matmul", x, 2); err != nil {
			return Type{}, err
		}
	}
	if err := sameDType("matmul", args); err != nil {
		return Type{}, err
	}
	if a.Type.Shape[1] != b.Type.Shape[0] {
		return Type{}, errf("matmul", "inner dims differ: %s is %s but %s is %s", a.Name, a.Type, b.Name, b.Type)
	}
	return Type{a.Type.DType, Shape{a.Type.Shape[0], b.Type.Shape[1]}}, nil
}

func inferReduce(name string, floatOnly bool) func([]Arg, Attrs) (Type, error) {
	return func(args []Arg, at Attrs) (Type, error) {
		x := args[0]
		if floatOnly {
			if err := wantFloat(name, x); err != nil {
				return Type{}, err
			}
		} else if x.Type.DType == Bool {
			return Type{}, errf(name, "%s must be numeric, is %s", x.Name, x.Type)
		}
		axes := at.Ints("axes")
		if err := checkAxes(name, x, axes); err != nil {
			return Type{}, err
		}
		var out Shape
		for i, d := range x.Type.Shape {
			if !slices.Contains(axes, i) {
				out = append(out, d)
			}
		}
		return Type{x.Type.DType, out}, nil
	}
}

// checkAxes wants strictly increasing axes within the operand's rank.
func checkAxes(op string, x Arg, axes []int) error {
	if len(axes) == 0 {
		return errf(op, "axes must not be empty")
	}
	for i, a := range axes {
		if err := wantAxis(op, x, a); err != nil {
			return err
		}
		if i > 0 && a <= axes[i-1] {
			return errf(op, "axes must be strictly increasing, got %v", Shape(axes))
		}
	}
	return nil
}

// inferAlongAxis is the rule of softmax, log_softmax and cumsum: same type, axis in range.
func inferAlongAxis(name string) func([]Arg, Attrs) (Type, error) {
	return func(args []Arg, at Attrs) (Type, error) {
		if err := wantFloat(name, args[0]); err != nil {
			return Type{}, err
		}
		return args[0].Type, wantAxis(name, args[0], at.Int("axis"))
	}
}

// inferNorm checks x, gamma and beta of layer_norm (over the last dim) and batch_norm (per
// channel, dim 1, over all the others).
func inferNorm(name string, channelDim func(Shape) int) func([]Arg, Attrs) (Type, error) {
	return func(args []Arg, at Attrs) (Type, error) {
		x := args[0]
		if err := wantFloat(name, x); err != nil {
			return Type{}, err
		}
		if err := sameDType(name, args); err != nil {
			return Type{}, err
		}
		c := channelDim(x.Type.Shape)
		if c < 0 {
			return Type{}, errf(name, "%s has an unsupported rank: %s", x.Name, x.Type)
		}
		for _, p := range args[1:] {
			if !p.Type.Shape.Equal(Shape{x.Type.Shape[c]}) {
				return Type{}, errf(name, "%s must be [%d] to match dim %d of %s, is %s", p.Name, x.Type.Shape[c], c, x.Name, p.Type)
			}
		}
		if at.Float("eps") <= 0 {
			return Type{}, errf(name, "eps must be positive")
		}
		if v, ok := at.Get("group"); ok { // batch_norm's (ir.BatchNormGroup)
			if k := v.(int); k < 0 || k > 0 && x.Type.Shape[0]%k != 0 {
				return Type{}, errf(name, "group %d must be a positive divisor of dim 0 of %s (%s), or 0 for the whole dim", k, x.Name, x.Type)
			}
		}
		return x.Type, nil
	}
}

func layerNormChannel(s Shape) int { return len(s) - 1 }

func batchNormChannel(s Shape) int {
	if len(s) == 2 || len(s) == 4 {
		return 1
	}
	return -1
}
