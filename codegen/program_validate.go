package codegen

import (
	"fmt"
	"slices"

	"github.com/autopar/autopar/ir"
)

// Validate checks every invariant the runtime relies on and returns all the problems found,
// each positioned at its line of the text form (see Pos) and naming the buffer at fault:
//   - buffers have a valid type; each is defined by exactly one instruction, before any use,
//     and never used after it is freed;
//   - every kind has the operands it reads and defines a buffer exactly when it should;
//   - compute ops are non-leaf ops whose shape rule, run on the operand buffers' types, gives
//     the out buffer's type; collectives, accumulate and store agree on types and shapes;
//   - groups are non-empty, hold distinct devices and contain this program's device; peers
//     are other devices; transfers are tagged.
//
// It does not check what needs other programs (that every send has its recv) or the data
// (that a load's feed exists): the runtime reports those.
func (p *Program) Validate() error {
	v := validator{p: p, defined: make([]int, len(p.Buffers)), freed: make([]int, len(p.Buffers))}
	for b, d := range p.Buffers {
		v.defined[b], v.freed[b] = -1, -1
		if d.Type.DType == ir.Invalid {
			v.errs = append(v.errs, ir.Errorf(ir.Pos{File: p.FileName(), Line: 2 + b, Col: 1},
				"buffer %%%d (%s) has no dtype, expected a tensor type", b, d.Name))
		}
	}
	for i := range p.Instrs {
		v.instr(i)
	}
	return v.errs.Err()
}

// numOps is the number of rows of the op table: ops are 1..numOps.
var numOps = len(ir.AllOps())

type validator struct {
	p       *Program
	defined []int // instruction that defines each buffer, or -1
	freed   []int // instruction that frees each buffer, or -1
	errs    ir.ErrorList
}

func (v *validator) errorf(i int, format string, args ...any) *ir.Error {
	e := ir.Errorf(v.p.Pos(i), "%s: "+format, append([]any{v.p.Instrs[i].Kind}, args...)...)
	v.errs = append(v.errs, e)
	return e
}

// operands reports whether instruction i has exactly n live operands (n < 0: at least one).
func (v *validator) operands(i, n int) bool {
	in := &v.p.Instrs[i]
	if (n >= 0 && len(in.Args) != n) || (n < 0 && len(in.Args) == 0) {
		want := fmt.Sprint(n)
		if n < 0 {
			want = "at least 1"
		}
		v.errorf(i, "%d operands, expected %s", len(in.Args), want)
		return false
	}
	ok := true
	for _, b := range in.Args {
		ok = v.live(i, b) && ok
	}
	return ok
}

func (v *validator) live(i int, b BufferID) bool {
	switch {
	case b < 0 || int(b) >= len(v.p.Buffers):
		v.errorf(i, "buffer %%%d is not declared, expected one of the %d declared buffers", b, len(v.p.Buffers))
	case v.defined[b] < 0:
		v.errorf(i, "buffer %%%d (%s) is used before it is defined", b, v.p.Buffers[b].Name)
	case v.freed[b] >= 0:
		v.errorf(i, "buffer %%%d (%s) is used after it is freed, expected a live buffer",
			b, v.p.Buffers[b].Name).WithNote(v.p.Pos(v.freed[b]), "freed here")
	default:
		return true
	}
	return false
}

// define checks the out buffer of instruction i: present exactly when want.
func (v *validator) define(i int, want bool) bool {
	out := v.p.Instrs[i].Out
	switch {
	case !want && out != NoBuffer:
		v.errorf(i, "defines %%%d, expected no result", out)
	case !want:
		return true
	case out == NoBuffer:
		v.errorf(i, "defines no buffer, expected a result")
	case out < 0 || int(out) >= len(v.p.Buffers):
		v.errorf(i, "defines buffer %%%d, which is not declared", out)
	case v.defined[out] >= 0:
		v.errorf(i, "buffer %%%d (%s) is defined twice, expected one definition",
			out, v.p.Buffers[out].Name).WithNote(v.p.Pos(v.defined[out]), "first defined here")
	default:
		v.defined[out] = i
		return true
	}
	return false
}

func (v *validator) instr(i int) {
	in := &v.p.Instrs[i]
	switch in.Kind {
	case Compute:
		args := v.operands(i, -1)
		if v.define(i, true) && args {
			v.compute(i)
		}
	case Constant:
		v.operands(i, 0)
		v.define(i, true)
	case Load:
		v.operands(i, 0)
		if v.define(i, true) {
			v.load(i)
		}
	case Store:
		if v.operands(i, 1) && v.define(i, false) {
			v.store(i)
		}
	case Accumulate:
		if v.operands(i, 2) && v.define(i, false) {
			v.sameType(i, in.Args[0], in.Args[1])
		}
	case AllReduce, AllGather, ReduceScatter, AllToAll:
		args := v.operands(i, 1)
		if v.define(i, in.Kind != AllReduce) && args && v.group(i) {
			v.collective(i)
		}
	case Send, Recv:
		if in.Kind == Send {
			v.operands(i, 1)
		} else {
			v.operands(i, 0)
		}
		v.define(i, in.Kind == Recv)
		v.transfer(i)
	case Free:
		if len(in.Args) == 0 {
			v.errorf(i, "nothing to free, expected at least 1 buffer")
		}
		for _, b := range in.Args { // one at a time, so "free %1, %1" is a use after free
			if v.live(i, b) {
				v.freed[b] = i
			}
		}
		v.define(i, false)
	default:
		v.errorf(i, "unknown instruction kind %d", in.Kind)
	}
}

func (v *validator) compute(i int) {
	in := &v.p.Instrs[i]
	if in.Op == ir.OpInvalid || int(in.Op) > numOps || in.Op.IsLeaf() {
		v.errorf(i, "op %s cannot be computed, expected a non-leaf op", in.Op)
		return
	}
	def := in.Op.Def()
	if len(in.Args) < def.Arity || (!def.Variadic && len(in.Args) != def.Arity) {
		v.errorf(i, "%s takes %d operands, got %d", in.Op, def.Arity, len(in.Args))
		return
	}
	args := make([]ir.Arg, len(in.Args))
	for k, b := range in.Args {
		args[k] = ir.Arg{Name: fmt.Sprintf("%%%d", b), Type: v.p.Buffers[b].Type}
	}
	t, _, err := ir.InferType(in.Op, args, in.Attrs)
	if err != nil {
		v.errorf(i, "%v", err)
		return
	}
	if want := v.p.Buffers[in.Out].Type; !t.Equal(want) {
		v.errorf(i, "%s gives %s, but buffer %%%d is declared %s", in.Op, t, in.Out, want)
	}
}

func (v *validator) load(i int) {
	in := &v.p.Instrs[i]
	t := v.p.Buffers[in.Out].Type
	if in.Name == "" {
		v.errorf(i, "no feed name, expected the param, input or state to load")
	}
	if len(in.Offsets) != t.Shape.Rank() || slices.ContainsFunc(in.Offsets, func(o int) bool { return o < 0 }) {
		v.errorf(i, "offsets %v, expected %d non-negative offsets for %s", in.Offsets, t.Shape.Rank(), t)
	}
}

func (v *validator) store(i int) {
	in := &v.p.Instrs[i]
	t := v.p.Buffers[in.Args[0]].Type
	if in.Name == "" {
		v.errorf(i, "no result name, expected the param, state or output to store")
	}
	if in.Full.DType != t.DType || in.Full.Shape.Rank() != t.Shape.Rank() || len(in.Offsets) != t.Shape.Rank() {
		v.errorf(i, "block %s at offsets %v does not fit %s, expected the same dtype and rank", t, in.Offsets, in.Full)
		return
	}
	for d, o := range in.Offsets {
		if o < 0 || o+t.Shape[d] > in.Full.Shape[d] {
			v.errorf(i, "block %s at offsets %v overruns %s on dim %d", t, in.Offsets, in.Full, d)
			return
		}
	}
}

func (v *validator) sameType(i int, a, b BufferID) {
	ta, tb := v.p.Buffers[a].Type, v.p.Buffers[b].Type
	if !ta.Equal(tb) {
		v.errorf(i, "%%%d is %s but %%%d is %s, expected equal types", a, ta, b, tb)
	}
}

func (v *validator) group(i int) bool {
	g := v.p.Instrs[i].Group
	if len(g) == 0 {
		v.errorf(i, "empty group, expected the devices taking part")
		return false
	}
	for k, d := range g {
		if d < 0 || slices.Contains(g[:k], d) {
			v.errorf(i, "group %s lists device %d twice or negative, expected distinct devices", formatGroup(g), d)
			return false
		}
	}
	if Rank(g, v.p.Device) < 0 {
		v.errorf(i, "group %s does not contain device %d, expected this program's device", formatGroup(g), v.p.Device)
		return false
	}
	return true
}

func (v *validator) collective(i int) {
	in := &v.p.Instrs[i]
	t := v.p.Buffers[in.Args[0]].Type
	want, ok := CollectiveOut(in.Kind, t, len(in.Group), in.Axis, in.ConcatAxis)
	if !ok {
		v.errorf(i, "axes %d,%d do not fit %s split %d ways", in.Axis, in.ConcatAxis, t, len(in.Group))
		return
	}
	if in.Kind == AllReduce {
		return
	}
	if got := v.p.Buffers[in.Out].Type; !got.Equal(want) {
		v.errorf(i, "gives %s, but buffer %%%d is declared %s", want, in.Out, got)
	}
}

func (v *validator) transfer(i int) {
	in := &v.p.Instrs[i]
	if in.Peer == v.p.Device || in.Peer < 0 {
		v.errorf(i, "peer %d, expected another device", in.Peer)
	}
	if in.Tag.Value == "" {
		v.errorf(i, "no tag, expected the value and micro-batch the transfer carries")
	}
}
