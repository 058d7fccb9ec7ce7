package onnx

import (
	"context"
	"fmt"
	"math"

	"github.com/autopar/autopar/frontend/onnx/onnxpb"
	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/runtime/interp"
	"github.com/autopar/autopar/runtime/kernels"
)

// node is the ONNX node being lowered, with typed access to its inputs and attributes.
type node struct {
	im *importer
	p  *onnxpb.NodeProto
}

// lowerFn lowers one node: it reads inputs through n.in / n.rt / n.known and sets every
// output it produces with n.set / n.setKnown.
type lowerFn func(n *node) error

// foldable marks ops that run at import time when every input is known (shape arithmetic,
// masks). Ops on params are never folded: a param's value is trained, not fixed.
var foldable = map[string]bool{}

func (im *importer) node(p *onnxpb.NodeProto) error {
	n := &node{im: im, p: p}
	im.cur = n
	defer func() { im.cur = nil }()
	if len(p.GetOutput()) == 0 || p.GetOutput()[0] == "" {
		return n.wrap(fmt.Errorf("it has no output"))
	}
	var err error
	switch {
	case !im.folding && foldable[p.GetOpType()] && n.allKnown():
		err = im.fold(n)
	default:
		err = lowerings[p.GetOpType()](n)
	}
	if err != nil {
		return n.wrap(err)
	}
	for _, o := range p.GetOutput() {
		if _, ok := im.vals[o]; !ok && o != "" && !im.optionalOutput(p, o) {
			return n.wrap(fmt.Errorf("output %q is not produced by the importer", o))
		}
	}
	return nil
}

// optionalOutput: outputs beyond the first may be left out (batch norm's running
// statistics, dropout's mask, LayerNormalization's mean); a node that reads one gets an
// error from missing.
func (im *importer) optionalOutput(p *onnxpb.NodeProto, o string) bool { return o != p.GetOutput()[0] }

func (n *node) wrap(err error) error {
	if n.im.folding {
		return err
	}
	return fmt.Errorf("%s: node %q (%s): %w", n.im.path, n.p.GetName(), n.p.GetOpType(), err)
}

// allKnown reports whether every input is known at import time. A param's value is
// known but not fixed, so only the ops that read its type alone fold over it.
func (n *node) allKnown() bool {
	typeOnly := n.p.GetOpType() == "Shape" || n.p.GetOpType() == "Size"
	for _, name := range n.p.GetInput() {
		if name == "" {
			continue
		}
		v := n.im.vals[name]
		if v == nil || v.c == nil || v.param && !typeOnly {
			return false
		}
	}
	return true
}

// fold runs a node whose inputs are all known at import time: it lowers the node into a
// scratch graph whose inputs are those tensors and runs the serial interpreter on it, so
// folding uses the same kernels as the model.
func (im *importer) fold(n *node) error {
	sub := newImporter(im.path, ir.NewGraph("fold"), im.opset)
	sub.folding = true
	feeds := interp.Feeds{}
	for _, name := range n.p.GetInput() {
		if name == "" {
			continue
		}
		t := im.vals[name].c
		leaf := sub.g.FreshName("in")
		id, err := sub.g.Declare(ir.OpInput, leaf, t.Type, -1, im.pos())
		if err != nil {
			return err
		}
		feeds[leaf] = t
		sub.vals[name] = &val{id: id, c: t, onnx: name}
	}
	if err := sub.node(n.p); err != nil {
		return err
	}
	var todo []string
	for _, o := range n.p.GetOutput() {
		if v, ok := sub.vals[o]; ok && o != "" {
			if v.c != nil {
				im.vals[o] = &val{id: ir.NoValue, c: v.c, onnx: o}
				continue
			}
			todo = append(todo, o)
			sub.g.AddOutput(v.id, im.pos())
		}
	}
	if len(todo) == 0 {
		return nil
	}
	res, err := interp.Run(context.Background(), sub.g, feeds)
	if err != nil {
		return fmt.Errorf("folding it at import time: %v", err)
	}
	for i, o := range todo {
		im.vals[o] = &val{id: ir.NoValue, c: res.Outputs[i], onnx: o}
	}
	return nil
}

// in returns input i, or nil where it is absent (optional inputs are "" or left off) or
// is an output the importer does not produce (see missing).
func (n *node) in(i int) *val {
	ins := n.p.GetInput()
	if i >= len(ins) || ins[i] == "" {
		return nil
	}
	return n.im.vals[ins[i]]
}

// missing says why input i is nil.
func (n *node) missing(i int) error {
	if ins := n.p.GetInput(); i < len(ins) && ins[i] != "" {
		return fmt.Errorf("input %d (%q) is not available: no node produces it, or it is an extra output (running statistics, a mask) the importer does not produce", i, ins[i])
	}
	return fmt.Errorf("input %d is missing", i)
}

func (n *node) nin() int { return len(n.p.GetInput()) }

// rt returns input i as a graph value; it must be present.
func (n *node) rt(i int) (ir.ValueID, error) {
	v := n.in(i)
	if v == nil {
		return ir.NoValue, n.missing(i)
	}
	return n.im.rt(v)
}

// typ returns the type of input i, known or not.
func (n *node) typ(i int) (ir.Type, error) {
	v := n.in(i)
	switch {
	case v == nil:
		return ir.Type{}, n.missing(i)
	case v.id != ir.NoValue:
		return n.im.g.Value(v.id).Type, nil
	}
	return v.c.Type, nil
}

// known returns input i's value at import time, or an error saying it must be known.
func (n *node) known(i int, what string) (*kernels.Tensor, error) {
	v := n.in(i)
	if v == nil {
		return nil, fmt.Errorf("%s: %w", what, n.missing(i))
	}
	if v.c == nil {
		return nil, fmt.Errorf("input %d (%s) must be known at import time, but is computed from the data", i, what)
	}
	return v.c, nil
}

// ints returns a known integer input as Go ints, clamped to the int32 range (Slice's
// INT64_MAX means "to the end").
func (n *node) ints(i int, what string) ([]int, error) {
	t, err := n.known(i, what)
	if err != nil {
		return nil, err
	}
	if t.Int == nil {
		return nil, fmt.Errorf("input %d (%s) must be integers, is %s", i, what, t.Type)
	}
	out := make([]int, len(t.Int))
	for j, x := range t.Int {
		out[j] = clampInt(x)
	}
	return out, nil
}

func (n *node) outName(i int) string {
	if i < len(n.p.GetOutput()) {
		return sanitize(n.p.GetOutput()[i])
	}
	return sanitize(n.p.GetName())
}

// emit appends an op named after output 0 plus suffix.
func (n *node) emit(op ir.Op, suffix string, args []ir.ValueID, at ir.Attrs) (ir.ValueID, error) {
	name := n.outName(0)
	if suffix != "" {
		name += "." + suffix
	}
	return n.im.emit(op, name, args, at)
}

// set binds output i to a graph value.
func (n *node) set(i int, id ir.ValueID) {
	o := n.p.GetOutput()[i]
	n.im.vals[o] = &val{id: id, onnx: o}
}

// setKnown binds output i to a tensor known at import time.
func (n *node) setKnown(i int, t *kernels.Tensor) {
	o := n.p.GetOutput()[i]
	n.im.vals[o] = &val{id: ir.NoValue, c: t, onnx: o}
}

// alias binds output i to what input j stands for (Identity, no-op reshapes).
func (n *node) alias(i, j int) error {
	in := n.in(j)
	if in == nil {
		return n.missing(j)
	}
	v := *in
	v.onnx = n.p.GetOutput()[i]
	n.im.vals[v.onnx] = &v
	return nil
}

func (n *node) attr(name string) *onnxpb.AttributeProto {
	for _, a := range n.p.GetAttribute() {
		if a.GetName() == name {
			return a
		}
	}
	return nil
}

func (n *node) attrInt(name string, def int) int {
	if a := n.attr(name); a != nil {
		return clampInt(a.GetI())
	}
	return def
}

func (n *node) attrInts(name string) ([]int, bool) {
	a := n.attr(name)
	if a == nil {
		return nil, false
	}
	out := make([]int, len(a.GetInts()))
	for i, x := range a.GetInts() {
		out[i] = clampInt(x)
	}
	return out, true
}

func (n *node) attrFloat(name string, def float64) float64 {
	if a := n.attr(name); a != nil {
		return float64(a.GetF())
	}
	return def
}

func (n *node) attrString(name, def string) string {
	if a := n.attr(name); a != nil {
		return string(a.GetS())
	}
	return def
}

func clampInt(x int64) int {
	return int(max(min(x, math.MaxInt32), math.MinInt32))
}

// axis normalizes a possibly negative axis against rank.
func axis(a, rank int) (int, error) {
	if a < 0 {
		a += rank
	}
	if a < 0 || a >= rank {
		return 0, fmt.Errorf("axis %d is out of range for rank %d", a, rank)
	}
	return a, nil
}

// elementwiseArgs returns the inputs of a broadcasting op as graph values. A known uniform
// input whose shape the others already cover becomes a scalar constant: zeros_like(x)
// folded at import time would otherwise carry the batch size in its type, which
// micro-batching cannot rescale.
func (n *node) elementwiseArgs(k int) ([]ir.ValueID, error) {
	types := make([]ir.Type, k)
	for i := range types {
		t, err := n.typ(i)
		if err != nil {
			return nil, err
		}
		types[i] = t
	}
	all, err := broadcastAll(types, -1)
	if err != nil {
		return nil, err
	}
	args := make([]ir.ValueID, k)
	for i := range args {
		v := n.in(i)
		if u, ok := uniformKnown(v); ok {
			if rest, err := broadcastAll(types, i); err == nil && rest.Equal(all) {
				id, err := n.im.scalar(sanitize(v.onnx), u, types[i].DType, nil)
				if err != nil {
					return nil, err
				}
				args[i] = id
				continue
			}
		}
		if args[i], err = n.im.rt(v); err != nil {
			return nil, err
		}
	}
	return args, nil
}

func uniformKnown(v *val) (float64, bool) {
	if v == nil || v.c == nil || v.param || v.id != ir.NoValue {
		return 0, false
	}
	return uniform(v.c)
}

// broadcastAll is the broadcast shape of types, leaving out index skip (-1: none).
func broadcastAll(types []ir.Type, skip int) (ir.Shape, error) {
	var s ir.Shape
	for i, t := range types {
		if i == skip {
			continue
		}
		var err error
		if s, err = broadcastShapes(s, t.Shape); err != nil {
			return nil, err
		}
	}
	return s, nil
}
