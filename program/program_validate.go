package program

import (
	"fmt"
	"math"
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
//     are other devices; transfers are tagged;
//   - blocks cut Instrs into contiguous stretches, and the schedule runs every block of the
//     step once and every micro-batch block once per micro-batch, in micro-batch order,
//     each block of a micro-batch after the blocks declared before it (see checkSchedule);
//   - blocks of the step touch only buffers of the step; micro-batch blocks define and
//     free only buffers of the micro-batch and free all of them (the runtime's memory does
//     not grow with the micro-batch count).
//
// Since every micro-batch runs its blocks in declaration order, checking the instructions
// once, block after block, checks every micro-batch: Validate never expands the schedule,
// and its time is the program's size plus its loops', whatever the micro-batch count.
//
// It does not check what needs other programs (that every send has its recv) or the data
// (that a load's feed exists): the runtime reports those.
func (p *Program) Validate() error {
	v := validator{p: p, defined: make([]int, len(p.Buffers)), freed: make([]int, len(p.Buffers))}
	for b, d := range p.Buffers {
		v.defined[b], v.freed[b] = -1, -1
		if d.Type.DType == ir.Invalid {
			v.errs = append(v.errs, ir.Errorf(p.bufferPos(b), "buffer %%%d (%s) has no dtype, expected a tensor type", b, d.Name))
		}
		if d.PerMicrobatch && len(p.Blocks) == 0 {
			v.errs = append(v.errs, ir.Errorf(p.bufferPos(b), "buffer %%%d (%s) is per micro-batch in a program without micro-batch blocks", b, d.Name))
		}
	}
	if !v.structure() {
		return v.errs.Err()
	}
	v.checkSchedule()
	blocks, _ := p.BlockSchedule()
	for _, bl := range blocks {
		v.perMB = bl.PerMicrobatch
		for i := bl.Start; i < bl.End; i++ {
			v.instr(i)
		}
	}
	for b, d := range p.Buffers {
		if d.PerMicrobatch && v.defined[b] >= 0 && v.freed[b] < 0 {
			v.errs = append(v.errs, ir.Errorf(p.Pos(v.defined[b]), "%s: buffer %%%d (%s) of the micro-batch is never freed, expected a free in a micro-batch block",
				p.Instrs[v.defined[b]].Kind, b, d.Name))
		}
	}
	return v.errs.Err()
}

// MaxBlocks bounds the blocks of a program (codegen emits 4).
const MaxBlocks = 16

// structure checks the blocks and the loops' shape; false if the rest cannot be checked.
func (v *validator) structure() bool {
	p := v.p
	n := len(v.errs)
	if len(p.Blocks) == 0 {
		if len(p.Schedule) > 0 {
			v.errs = append(v.errs, ir.Errorf(p.loopPos(0), "schedule without blocks, expected blocks to run"))
		}
		if p.Microbatches != 0 {
			v.errs = append(v.errs, ir.Errorf(p.headerPos(), "%d micro-batches in a program without blocks, expected 0", p.Microbatches))
		}
		return len(v.errs) == n
	}
	if p.Microbatches < 1 || p.Microbatches > MaxMicrobatches {
		v.errs = append(v.errs, ir.Errorf(p.headerPos(), "%d micro-batches, expected 1 to %d", p.Microbatches, MaxMicrobatches))
	}
	if len(p.Blocks) > MaxBlocks {
		v.errs = append(v.errs, ir.Errorf(p.blockPos(MaxBlocks), "%d blocks, expected at most %d", len(p.Blocks), MaxBlocks))
		return false
	}
	end := 0
	for j, b := range p.Blocks {
		if b.Start != end || b.End < b.Start || b.End > len(p.Instrs) {
			v.errs = append(v.errs, ir.Errorf(p.blockPos(j), "block %d (%s) spans instructions [%d, %d), expected [%d, …) within the %d instructions",
				j, b.Name, b.Start, b.End, end, len(p.Instrs)))
			return false
		}
		end = b.End
	}
	if end != len(p.Instrs) {
		v.errs = append(v.errs, ir.Errorf(p.blockPos(len(p.Blocks)-1), "blocks end at instruction %d, expected them to cover all %d", end, len(p.Instrs)))
	}
	B := p.Microbatches
	for l, lp := range p.Schedule {
		bad := func(format string, args ...any) {
			v.errs = append(v.errs, ir.Errorf(p.loopPos(l), "loop %d: "+format, append([]any{l}, args...)...))
		}
		if len(lp.Body) == 0 {
			bad("no calls, expected at least one block to run")
			continue
		}
		once := 0
		for _, c := range lp.Body {
			switch {
			case c.Block < 0 || c.Block >= len(p.Blocks):
				bad("calls block %d, expected one of the %d blocks", c.Block, len(p.Blocks))
			case !p.Blocks[c.Block].PerMicrobatch:
				once++
				if c.Shift != 0 {
					bad("block %d (%s) of the step with shift %d, expected 0", c.Block, p.Blocks[c.Block].Name, c.Shift)
				}
			case lp.From < 0 || lp.From > lp.To || lp.To > B || c.Shift < -B || c.Shift > B ||
				lp.From+c.Shift < 0 || lp.To+c.Shift > B:
				bad("runs block %d (%s) for micro-batches [%d, %d)%+d, expected them within [0, %d)",
					c.Block, p.Blocks[c.Block].Name, lp.From, lp.To, c.Shift, B)
			}
		}
		if once > 0 && (len(lp.Body) != 1 || lp.From != 0 || lp.To != 1) {
			bad("runs a block of the step in a loop [%d, %d) of %d calls, expected it alone in [0, 1)", lp.From, lp.To, len(lp.Body))
		}
	}
	return len(v.errs) == n
}

// checkSchedule runs the schedule's calls against counters: every block of the step runs
// once, every micro-batch block runs micro-batches 0 … B−1 in order, and block j runs for a
// micro-batch only after every block declared before it has (a block of the step: after
// every earlier block has finished all its runs). Time: the loops' calls times the blocks,
// whatever the micro-batch count; memory: a counter per block.
func (v *validator) checkSchedule() {
	p := v.p
	B := p.Microbatches
	runs := make([]int, len(p.Blocks))
	for l, lp := range p.Schedule {
		iteration := func(i int) bool {
			for _, c := range lp.Body {
				if msg := v.call(runs, c.Block, i+c.Shift); msg != "" {
					v.errs = append(v.errs, ir.Errorf(p.loopPos(l), "loop %d at index %d: %s", l, i, msg))
					return false
				}
			}
			return true
		}
		if lp.To-lp.From < 3 || hasDuplicateBlock(lp.Body) {
			for i := lp.From; i < lp.To; i++ { // a block twice in a body fails by the second iteration
				if !iteration(i) {
					return
				}
			}
			continue
		}
		// Every iteration runs each block of the body once, one micro-batch further on: the
		// counts of the body's blocks and the micro-batches keep their distance, and a block
		// outside the body only falls behind. So the first and the last iteration decide.
		if !iteration(lp.From) {
			return
		}
		for _, c := range lp.Body {
			runs[c.Block] += lp.To - lp.From - 2
		}
		if !iteration(lp.To - 1) {
			return
		}
	}
	for j, b := range p.Blocks {
		want := B
		if !b.PerMicrobatch {
			want = 1
		}
		if runs[j] != want {
			v.errs = append(v.errs, ir.Errorf(p.blockPos(j), "block %d (%s) runs %d times, expected %d", j, b.Name, runs[j], want))
		}
	}
}

func hasDuplicateBlock(body []Call) bool {
	for k, c := range body {
		for _, d := range body[:k] {
			if c.Block == d.Block {
				return true
			}
		}
	}
	return false
}

// call checks one call of block j for micro-batch mb and counts it; it returns what is
// wrong, if anything.
func (v *validator) call(runs []int, j, mb int) string {
	p := v.p
	b := p.Blocks[j]
	if !b.PerMicrobatch {
		mb = p.Microbatches - 1 // after every micro-batch of the blocks before it
		if runs[j] > 0 {
			return fmt.Sprintf("block %d (%s) of the step runs again, expected it once", j, b.Name)
		}
	} else if mb != runs[j] {
		return fmt.Sprintf("block %d (%s) runs for micro-batch %d, expected micro-batch %d (each once, in order)", j, b.Name, mb, runs[j])
	}
	for i := range j {
		if !b.PerMicrobatch && p.Blocks[i].PerMicrobatch && runs[i] < p.Microbatches {
			return fmt.Sprintf("block %d (%s) of the step runs when block %d (%s) has run for %d of the %d micro-batches, expected the blocks in their order",
				j, b.Name, i, p.Blocks[i].Name, runs[i], p.Microbatches)
		}
		if p.Blocks[i].PerMicrobatch && runs[i] <= mb {
			return fmt.Sprintf("block %d (%s) runs for micro-batch %d before block %d (%s) has, expected the blocks of a micro-batch in their order",
				j, b.Name, mb, i, p.Blocks[i].Name)
		}
		if !p.Blocks[i].PerMicrobatch && runs[i] == 0 {
			return fmt.Sprintf("block %d (%s) runs before block %d (%s) of the step, expected the blocks in their order", j, b.Name, i, p.Blocks[i].Name)
		}
	}
	runs[j]++
	return ""
}

// numOps is the number of rows of the op table: ops are 1..numOps.
var numOps = len(ir.AllOps())

type validator struct {
	p       *Program
	defined []int // instruction that defines each buffer, or -1
	freed   []int // instruction that frees each buffer, or -1
	perMB   bool  // checking a micro-batch block
	errs    ir.ErrorList
}

// scope checks that buffer b may be touched (how: "used", "defined", "freed") by an
// instruction of the current block: a block of the step touches only buffers of the step;
// a micro-batch block defines and frees only buffers of the micro-batch.
func (v *validator) scope(i int, b BufferID, how string) bool {
	d := v.p.Buffers[b]
	switch {
	case !v.perMB && d.PerMicrobatch:
		v.errorf(i, "buffer %%%d (%s) of a micro-batch is %s in a block of the step, expected a buffer of the step", b, d.Name, how)
	case v.perMB && !d.PerMicrobatch && how != "used":
		v.errorf(i, "buffer %%%d (%s) of the step is %s in a micro-batch block, which runs once per micro-batch", b, d.Name, how)
	default:
		return true
	}
	return false
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
		return v.scope(i, b, "used")
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
		return v.scope(i, out, "defined")
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
			if v.live(i, b) && v.scope(i, b, "freed") {
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
		return
	}
	if len(in.Stride) == 0 {
		return
	}
	if !v.perMB {
		v.errorf(i, "stride %s in a block of the step, expected a stride only in a micro-batch block", formatInts(in.Stride))
		return
	}
	last := v.p.Microbatches - 1
	for d, s := range in.Stride {
		if len(in.Stride) != len(in.Offsets) || s < 0 || (last > 0 && s > (math.MaxInt-in.Offsets[d])/last) {
			v.errorf(i, "stride %s, expected %d non-negative strides that keep the offsets of micro-batch %d in an int", formatInts(in.Stride), len(in.Offsets), last)
			return
		}
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
	if v.perMB && in.Tag.MicroBatch != 0 {
		v.errorf(i, "tag %s in a micro-batch block, expected micro-batch 0 (the block's own)", in.Tag)
	}
}
