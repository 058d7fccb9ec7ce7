package codegen

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
// Defining instructions end with ": type" (the out buffer's declared type). Instruction i is
// on line Pos(i).Line, which is what Validate's errors point at. String never panics, even
// on a program Validate rejects.
func (p *Program) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "device %d\n", p.Device)
	for i, d := range p.Buffers {
		fmt.Fprintf(&b, "buffer %%%d %s: %s\n", i, d.Name, d.Type)
	}
	for i := range p.Instrs {
		b.WriteString(p.FormatInstr(i))
		b.WriteByte('\n')
	}
	return b.String()
}

// FileName is the name the text form of p is written under and that its positions carry:
// "device3.prog".
func (p *Program) FileName() string { return fmt.Sprintf("device%d.prog", p.Device) }

// Pos is the position of instruction i in the text form.
func (p *Program) Pos(i int) ir.Pos {
	return ir.Pos{File: p.FileName(), Line: 2 + len(p.Buffers) + i, Col: 1}
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
		fmt.Fprintf(&b, " to=%d tag=%s", in.Peer, in.Tag)
	case Recv:
		fmt.Fprintf(&b, " from=%d tag=%s", in.Peer, in.Tag)
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
