package program

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/autopar/autopar/ir"
)

// String prints p in its text form: a header line, one line per buffer, then one line per
// instruction:
//
//	device 0
//	buffer %0 x.mb0: f32[4,8]
//	buffer %1 w1: f32[8,16]
//	buffer %2 h.mb0: f32[4,16]
//	%0 = load x[0:4,0:8] : f32[4,8]
//	%1 = load w1[0:8,0:16] : f32[8,16]
//	%2 = compute matmul %0, %1 : f32[4,16]
//	all_reduce %2 group=[0,1] ; grad.w1
//	send %2 to=1 tag=h@mb0
//	free %0, %1
//
// A program with blocks adds the micro-batch count after the header, marks the buffers of a
// micro-batch, heads each block's instructions with its name, and ends with the schedule,
// one loop a line:
//
//	device 0
//	microbatches 4
//	buffer %0 w1: f32[8,16]
//	buffer %1 x: f32[4,8] per-microbatch
//	block prologue
//	%0 = load w1[0:8,0:16] : f32[8,16]
//	block forward per-microbatch
//	%1 = load x[0:4,0:8] stride=[4,0] : f32[4,8]
//	send %1 to=1 tag=x@mb
//	…
//	schedule
//	run prologue
//	for i in [0,3): forward(i)
//	for i in [0,1): forward(i+3), backward(i)
//	for i in [1,4): backward(i)
//	run update
//
// In a micro-batch block, a load reads micro-batch mb's block at offsets + mb·stride and a
// tag @mb is the micro-batch the block runs for. Defining instructions end with ": type"
// (the out buffer's declared type). Instruction i is on line Pos(i).Line, which is what
// Validate's errors point at. String never panics, even on a program Validate rejects.
func (p *Program) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "device %d\n", p.Device)
	if len(p.Blocks) > 0 {
		fmt.Fprintf(&b, "microbatches %d\n", p.Microbatches)
	}
	for i, d := range p.Buffers {
		fmt.Fprintf(&b, "buffer %%%d %s: %s", i, d.Name, d.Type)
		if d.PerMicrobatch {
			b.WriteString(" per-microbatch")
		}
		b.WriteByte('\n')
	}
	if len(p.Blocks) == 0 {
		for i := range p.Instrs {
			b.WriteString(p.FormatInstr(i))
			b.WriteByte('\n')
		}
		return b.String()
	}
	for _, bl := range p.Blocks {
		b.WriteString("block " + bl.Name)
		if bl.PerMicrobatch {
			b.WriteString(" per-microbatch")
		}
		b.WriteByte('\n')
		for i := max(0, bl.Start); i < min(bl.End, len(p.Instrs)); i++ {
			b.WriteString(p.FormatInstr(i))
			b.WriteByte('\n')
		}
	}
	b.WriteString("schedule\n")
	for _, l := range p.Schedule {
		b.WriteString(p.formatLoop(l))
		b.WriteByte('\n')
	}
	return b.String()
}

// formatLoop prints one loop of the schedule: "run update" for a block of the step,
// "for i in [0,4): forward(i+3), backward(i)" for micro-batch blocks.
func (p *Program) formatLoop(l Loop) string {
	name := func(j int) string {
		if j >= 0 && j < len(p.Blocks) {
			return p.Blocks[j].Name
		}
		return fmt.Sprintf("block%d", j)
	}
	if len(l.Body) == 1 && l.From == 0 && l.To == 1 && l.Body[0].Block >= 0 && l.Body[0].Block < len(p.Blocks) &&
		!p.Blocks[l.Body[0].Block].PerMicrobatch {
		return "run " + name(l.Body[0].Block)
	}
	calls := make([]string, len(l.Body))
	for k, c := range l.Body {
		switch {
		case c.Shift > 0:
			calls[k] = fmt.Sprintf("%s(i+%d)", name(c.Block), c.Shift)
		case c.Shift < 0:
			calls[k] = fmt.Sprintf("%s(i%d)", name(c.Block), c.Shift)
		default:
			calls[k] = name(c.Block) + "(i)"
		}
	}
	return fmt.Sprintf("for i in [%d,%d): %s", l.From, l.To, strings.Join(calls, ", "))
}

// FileName is the name the text form of p is written under and that its positions carry:
// "device3.prog".
func (p *Program) FileName() string { return fmt.Sprintf("device%d.prog", p.Device) }

// headLines is the number of lines before the first buffer.
func (p *Program) headLines() int {
	if len(p.Blocks) > 0 {
		return 2
	}
	return 1
}

// Pos is the position of instruction i in the text form.
func (p *Program) Pos(i int) ir.Pos {
	line := p.headLines() + len(p.Buffers) + 1 + i
	if len(p.Blocks) > 0 {
		j := p.BlockOf(i)
		if j < 0 {
			j = len(p.Blocks) - 1
		}
		line += j + 1
	}
	return ir.Pos{File: p.FileName(), Line: line, Col: 1}
}

func (p *Program) headerPos() ir.Pos { return ir.Pos{File: p.FileName(), Line: 1, Col: 1} }

func (p *Program) bufferPos(b int) ir.Pos {
	return ir.Pos{File: p.FileName(), Line: p.headLines() + 1 + b, Col: 1}
}

// blockPos is the line of block j's header (j may be past the last block).
func (p *Program) blockPos(j int) ir.Pos {
	start := len(p.Instrs)
	if j < len(p.Blocks) {
		start = max(0, min(p.Blocks[j].Start, len(p.Instrs)))
	}
	return ir.Pos{File: p.FileName(), Line: p.headLines() + len(p.Buffers) + 1 + start + j, Col: 1}
}

// loopPos is the line of loop l of the schedule.
func (p *Program) loopPos(l int) ir.Pos {
	return ir.Pos{File: p.FileName(), Line: p.headLines() + len(p.Buffers) + len(p.Blocks) + len(p.Instrs) + 2 + l, Col: 1}
}

// bufferType returns the declared type of b, or the zero Type when b is out of range.
func (p *Program) bufferType(b BufferID) ir.Type {
	if b < 0 || int(b) >= len(p.Buffers) {
		return ir.Type{}
	}
	return p.Buffers[b].Type
}

// FormatInstr prints instruction i as its text-form line.
func (p *Program) FormatInstr(i int) string {
	in := &p.Instrs[i]
	var b strings.Builder
	if in.Out != NoBuffer && in.Kind != AllReduce {
		fmt.Fprintf(&b, "%%%d = ", in.Out)
	}
	b.WriteString(in.Kind.String())
	switch in.Kind {
	case Compute:
		b.WriteString(" " + in.Op.String())
		writeBuffers(&b, " ", in.Args)
		for _, a := range in.Attrs {
			fmt.Fprintf(&b, " %s=%s", a.Name, ir.FormatAttrValue(a.Value))
		}
	case Constant:
		b.WriteString(" " + ir.FormatAttrValue(in.Value))
	case Load:
		b.WriteString(" " + in.Name + formatBlock(in.Offsets, p.bufferType(in.Out).Shape))
		if len(in.Stride) > 0 {
			b.WriteString(" stride=" + formatInts(in.Stride))
		}
	case Store:
		writeBuffers(&b, " ", in.Args)
		var shape ir.Shape
		if len(in.Args) > 0 {
			shape = p.bufferType(in.Args[0]).Shape
		}
		fmt.Fprintf(&b, " -> %s%s of %s", in.Name, formatBlock(in.Offsets, shape), in.Full)
	case AllGather, ReduceScatter, AllToAll, AllReduce:
		writeBuffers(&b, " ", in.Args)
		if in.Kind != AllReduce {
			fmt.Fprintf(&b, " axis=%d", in.Axis)
		}
		if in.Kind == AllToAll {
			fmt.Fprintf(&b, " concat=%d", in.ConcatAxis)
		}
		b.WriteString(" group=" + formatGroup(in.Group))
	case Send:
		writeBuffers(&b, " ", in.Args)
		fmt.Fprintf(&b, " to=%d tag=%s", in.Peer, p.formatTag(i))
	case Recv:
		fmt.Fprintf(&b, " from=%d tag=%s", in.Peer, p.formatTag(i))
	default:
		writeBuffers(&b, " ", in.Args)
	}
	if in.Out != NoBuffer && in.Kind != AllReduce {
		b.WriteString(" : " + p.bufferType(in.Out).String())
	}
	if in.Note != "" {
		b.WriteString(" ; " + in.Note)
	}
	return b.String()
}

// String prints a tag as value@mbN.
func (t Tag) String() string { return t.Value + "@mb" + strconv.Itoa(t.MicroBatch) }

// formatTag prints instruction i's tag: value@mbN, or in a micro-batch block value@mb (the
// block's micro-batch), value@mb+N if it is shifted.
func (p *Program) formatTag(i int) string {
	t := p.Instrs[i].Tag
	if j := p.BlockOf(i); len(p.Blocks) > 0 && j >= 0 && p.Blocks[j].PerMicrobatch {
		if t.MicroBatch == 0 {
			return t.Value + "@mb"
		}
		return fmt.Sprintf("%s@mb%+d", t.Value, t.MicroBatch)
	}
	return t.String()
}

func formatInts(xs []int) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = strconv.Itoa(x)
	}
	return "[" + strings.Join(parts, ",") + "]"
}

func writeBuffers(b *strings.Builder, lead string, ids []BufferID) {
	for i, id := range ids {
		if i == 0 {
			b.WriteString(lead)
		} else {
			b.WriteString(", ")
		}
		fmt.Fprintf(b, "%%%d", id)
	}
}

func formatGroup(g []DeviceID) string {
	parts := make([]string, len(g))
	for i, d := range g {
		parts[i] = strconv.Itoa(int(d))
	}
	return "[" + strings.Join(parts, ",") + "]"
}

// formatBlock prints the block [off, off+shape) of every dim: "[0:4,8:16]". Dims without a
// known extent print the offset alone.
func formatBlock(off []int, shape ir.Shape) string {
	parts := make([]string, len(off))
	for d, o := range off {
		if d < len(shape) {
			parts[d] = fmt.Sprintf("%d:%d", o, o+shape[d])
		} else {
			parts[d] = strconv.Itoa(o)
		}
	}
	return "[" + strings.Join(parts, ",") + "]"
}
