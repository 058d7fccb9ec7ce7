package ilp

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"strings"
)

// WriteLP writes the problem in lp_solve's LP text format, for reading and
// debugging: the objective, one line per row, non-default bounds, then the
// int and bin sections. Unnamed variables and rows print as x<id> and r<id>.
// The output is deterministic: everything is written in ID order.
func (p *Problem) WriteLP(w io.Writer) error {
	bw := bufio.NewWriter(w)
	bw.WriteString("/* objective */\nmin:")
	p.writeTerms(bw, p.Objective)
	if p.ObjConstant != 0 || len(p.Objective) == 0 {
		fmt.Fprintf(bw, " %+g", p.ObjConstant)
	}
	bw.WriteString(";\n")
	if len(p.Rows) > 0 {
		bw.WriteString("\n/* rows */\n")
	}
	for i := range p.Rows {
		r := &p.Rows[i]
		fmt.Fprintf(bw, "%s:", p.RowName(RowID(i)))
		p.writeTerms(bw, r.Terms)
		if len(r.Terms) == 0 {
			bw.WriteString(" 0")
		}
		fmt.Fprintf(bw, " %s %g;\n", r.Sense, r.RHS)
	}
	p.writeBounds(bw)
	p.writeKindSection(bw, "int", Integer)
	p.writeKindSection(bw, "bin", Binary)
	return bw.Flush()
}

// String returns the problem as WriteLP prints it.
func (p *Problem) String() string {
	var sb strings.Builder
	p.WriteLP(&sb) // a strings.Builder never fails
	return sb.String()
}

func (p *Problem) writeTerms(w *bufio.Writer, terms []Term) {
	for _, t := range terms {
		fmt.Fprintf(w, " %+g %s", t.Coef, p.VarName(t.Var))
	}
}

// writeBounds writes the bounds that differ from LP format's default [0, +inf)
// for continuous and integer variables; binaries get theirs from "bin".
func (p *Problem) writeBounds(w *bufio.Writer) {
	first := true
	for i, v := range p.Vars {
		if v.Kind == Binary || (v.Lo == 0 && math.IsInf(v.Hi, 1)) {
			continue
		}
		if first {
			w.WriteString("\n/* bounds */\n")
			first = false
		}
		fmt.Fprintf(w, "%s <= %s <= %s;\n", lpNumber(v.Lo), p.VarName(VarID(i)), lpNumber(v.Hi))
	}
}

func (p *Problem) writeKindSection(w *bufio.Writer, section string, kind VarKind) {
	sep := "\n" + section + " "
	for i, v := range p.Vars {
		if v.Kind == kind {
			w.WriteString(sep + p.VarName(VarID(i)))
			sep = ","
		}
	}
	if sep == "," {
		w.WriteString(";\n")
	}
}

// lpNumber writes infinities as lp_solve's 1e30, which the LP format reads as
// infinite.
func lpNumber(x float64) string {
	switch {
	case math.IsInf(x, 1):
		return "1e30"
	case math.IsInf(x, -1):
		return "-1e30"
	}
	return fmt.Sprintf("%g", x)
}
