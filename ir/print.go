package ir

import (
	"bufio"
	"io"
	"strconv"
	"strings"
)

// Print writes g in the .ir text format, which frontend.Parse reads back to an equal graph:
//
//	graph mlp
//	param w1: f32[784,128]
//	input x: f32[32,784] batch=0
//	h = matmul x, w1
//	s = reduce_sum h axes=[1]
//	output s
//	update w1 <- w1.next
//
// After its attributes a value says which model block it is in (block=3; see Block) and,
// if a pass made it, what it is (role=grad of=w1; see Prov).
// Attributes equal to their default are left out.
func Print(w io.Writer, g *Graph) error {
	bw := bufio.NewWriter(w)
	if g.Name != "" {
		bw.WriteString("graph " + g.Name + "\n")
	}
	for i := range g.Values {
		bw.WriteString(FormatValue(g, ValueID(i)))
		bw.WriteByte('\n')
	}
	for _, o := range g.Outputs {
		bw.WriteString("output " + g.Values[o.Value].Name + "\n")
	}
	for _, u := range g.Updates {
		bw.WriteString("update " + g.Values[u.Target].Name + " <- " + g.Values[u.Value].Name + "\n")
	}
	return bw.Flush()
}

// String prints g to a string.
func (g *Graph) String() string {
	var b strings.Builder
	Print(&b, g)
	return b.String()
}

// FormatValue prints one value as its .ir line.
func FormatValue(g *Graph, id ValueID) string {
	v := &g.Values[id]
	var b strings.Builder
	if v.Op.IsLeaf() {
		b.WriteString(v.Op.String() + " " + v.Name + ": " + v.Type.String())
		writeAttrs(&b, v.Op.Def(), v.Attrs, "type")
		writeMarks(&b, g, v)
		return b.String()
	}
	b.WriteString(v.Name + " = " + v.Op.String())
	for i, a := range v.Args {
		if i == 0 {
			b.WriteByte(' ')
		} else {
			b.WriteString(", ")
		}
		b.WriteString(g.Values[a].Name)
	}
	writeAttrs(&b, v.Op.Def(), v.Attrs, "")
	writeMarks(&b, g, v)
	return b.String()
}

// ProvAttrs are the names the text format writes a value's provenance under, after its
// attributes: role=grad of=w, role=state of=w slot=m. No op has an attribute of these
// names; a model value (RoleForward) writes none.
var ProvAttrs = [...]string{"role", "of", "slot"}

// writeMarks writes what the value's attributes leave out: its block, then its provenance.
func writeMarks(b *strings.Builder, g *Graph, v *Value) {
	if v.Block != NoBlock {
		b.WriteString(" " + BlockAttr + "=" + strconv.Itoa(int(v.Block)))
	}
	writeProv(b, g, v.Prov)
}

func writeProv(b *strings.Builder, g *Graph, p Prov) {
	if p.Role == RoleForward {
		return
	}
	b.WriteString(" role=" + p.Role.String())
	if p.Of >= 0 && int(p.Of) < len(g.Values) {
		b.WriteString(" of=" + g.Values[p.Of].Name)
	}
	if p.Slot != "" {
		b.WriteString(" slot=" + p.Slot)
	}
}

func writeAttrs(b *strings.Builder, def *OpDef, at Attrs, skip string) {
	for _, a := range at {
		spec := def.attrSpec(a.Name)
		if a.Name == skip || (spec != nil && spec.Default != nil && FormatAttrValue(spec.Default) == FormatAttrValue(a.Value)) {
			continue
		}
		b.WriteString(" " + a.Name + "=" + FormatAttrValue(a.Value))
	}
}
