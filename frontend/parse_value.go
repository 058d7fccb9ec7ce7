package frontend

import (
	"errors"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/autopar/autopar/ir"
)

// maxElements bounds the element count of any tensor the parser accepts or infers. 2^50
// elements is far past any model autopar can place (GPT-3's largest weight has ~2^30), and
// keeps every element and byte count of ir.Shape and ir.Type well inside int64, so a typo
// like f32[100000000000,100000000000] is a clear error instead of a silent overflow.
const maxElements = ir.MaxElements

// maxRank bounds the length of every int list: a type's dims and the per-dim attributes
// (axes, perm, shape, ...). Real tensors have a handful of dims; the bound keeps ir's shape
// rules, some quadratic in the rank, fast on any input.
const maxRank = 64

// attrAt is where an attribute was written; name is the op table's spelling.
type attrAt struct {
	name string
	pos  ir.Pos
}

// bareWord is an unquoted name in attribute-value position that is neither a dtype nor
// inf/nan: always an error, kept to say what was written.
type bareWord string

// attrs parses name=value pairs up to the end of the line and checks each against op's
// table row: known name, given once, value of the right kind. It returns the attributes
// sorted by name, as ir.Attrs must be. Missing attributes and value ranges are left to
// ir's rules, which run in Append.
func (p *parser) attrs(op ir.Op) (ir.Attrs, bool) {
	def := op.Def()
	p.attrPos = p.attrPos[:0]
	p.prov = lineProv{}
	var at ir.Attrs
	ok := true
	for p.peek().kind != tokEOL {
		nameTok := p.peek()
		if nameTok.kind == tokIdent && p.toks[p.i+1].kind != tokEq {
			p.errorf(p.pos(nameTok), "unexpected name %s: operands are separated by ',' and attributes written name=value",
				clip(string(nameTok.text)))
			return nil, false
		}
		if _, good := p.expect(tokIdent, "an attribute name=value or end of line"); !good {
			return nil, false
		}
		p.next() // '=', checked above
		if string(nameTok.text) == ir.BlockAttr {
			if !p.blockAttr(nameTok) {
				return nil, false
			}
			continue
		}
		if isProvAttr(string(nameTok.text)) {
			if !p.provAttr(nameTok) {
				return nil, false
			}
			continue
		}
		v, good := p.parseValue()
		if !good {
			return nil, false
		}
		ok = p.addAttr(def, op, nameTok, v, &at) && ok
	}
	slices.SortFunc(at, func(a, b ir.Attr) int { return strings.Compare(a.Name, b.Name) })
	return at, ok
}

// addAttr checks one attribute and appends it to at.
func (p *parser) addAttr(def *ir.OpDef, op ir.Op, nameTok token, v any, at *ir.Attrs) bool {
	pos := p.pos(nameTok)
	spec := def.AttrSpec(string(nameTok.text))
	switch {
	case spec != nil && op.IsLeaf() && spec.Name == "type":
		p.errorf(pos, "%s: the type goes after the colon (%s NAME: TYPE), not in an attribute", op, op)
		return false
	case spec == nil:
		p.errorf(pos, "%s: unknown attribute %s%s", op, clip(string(nameTok.text)), attrHint(def, op, string(nameTok.text)))
		return false
	}
	for _, a := range p.attrPos {
		if a.name == spec.Name {
			p.errorf(pos, "%s: attribute %s is given twice", op, spec.Name).WithNote(a.pos, "first given here")
			return false
		}
	}
	p.attrPos = append(p.attrPos, attrAt{spec.Name, pos})
	cv, ok := coerce(spec.Kind, v)
	if w, isWord := v.(bareWord); !ok && isWord && spec.Kind == ir.AttrDType {
		p.errorf(pos, "%s: attribute %s: unknown dtype %s%s", op, spec.Name, clip(string(w)), dtypeHint(string(w)))
		return false
	}
	if !ok {
		p.errorf(pos, "%s: attribute %s wants %s, got %s", op, spec.Name, spec.Kind, describeValue(spec.Kind, v))
		return false
	}
	*at = append(*at, ir.Attr{Name: spec.Name, Value: cv})
	return true
}

// attrHint suggests the closest attribute of the op, or lists them all.
func attrHint(def *ir.OpDef, op ir.Op, name string) string {
	var names []string
	for _, s := range def.Attrs {
		if !(op.IsLeaf() && s.Name == "type") {
			names = append(names, s.Name)
		}
	}
	if s := suggest(name, names); s != "" {
		return s
	}
	if len(names) == 0 {
		return " (it takes none)"
	}
	return " (it takes " + strings.Join(names, ", ") + ")"
}

// coerce converts a parsed value to the Go type of an attribute kind. An int is accepted
// where a float is wanted (eps=1), nothing else is converted.
func coerce(k ir.AttrKind, v any) (any, bool) {
	switch k {
	case ir.AttrInt:
		_, ok := v.(int)
		return v, ok
	case ir.AttrInts:
		_, ok := v.([]int)
		return v, ok
	case ir.AttrFloat:
		switch x := v.(type) {
		case int:
			return float64(x), true
		case float64:
			return x, true
		}
	case ir.AttrString:
		_, ok := v.(string)
		return v, ok
	case ir.AttrDType:
		_, ok := v.(ir.DType)
		return v, ok
	case ir.AttrType:
		_, ok := v.(ir.Type)
		return v, ok
	}
	return nil, false
}

// describeValue prints a rejected value for a kind mismatch, with a hint where the likely
// mistake is known.
func describeValue(k ir.AttrKind, v any) string {
	switch x := v.(type) {
	case bareWord:
		if k == ir.AttrString {
			return clip(string(x)) + " (strings are written in double quotes)"
		}
		return clip(string(x))
	case string:
		return clip(strconv.Quote(x))
	}
	return clip(ir.FormatAttrValue(v))
}

// parseValue parses one attribute value: 3, -1.5e-05, inf, "text", [1,2], f16, f32[8,512].
func (p *parser) parseValue() (any, bool) {
	t := p.peek()
	switch t.kind {
	case tokString:
		p.next()
		s, err := strconv.Unquote(string(t.text))
		if err != nil {
			p.errorf(p.pos(t), "malformed string %s: %v", clip(string(t.text)), err)
			return nil, false
		}
		return s, true
	case tokNumber:
		p.next()
		return p.number(t)
	case tokLBrack:
		return p.parseInts("attribute")
	case tokIdent:
		if p.toks[p.i+1].kind == tokLBrack {
			return p.parseType()
		}
		p.next()
		if d, ok := ir.ParseDType(string(t.text)); ok {
			return d, true
		}
		switch string(t.text) {
		case "inf":
			return math.Inf(1), true
		case "nan":
			return math.NaN(), true
		}
		return bareWord(t.text), true
	}
	p.errorf(p.pos(t), "unexpected %s, want an attribute value: an int, a float, a \"string\", [ints], a dtype or a type like f32[8,512]",
		t.describe())
	return nil, false
}

// number parses a numeric token as an int if it is one, else as a float.
func (p *parser) number(t token) (any, bool) {
	if n, isInt, ok := parseInt(t.text); isInt {
		if !ok {
			p.errorf(p.pos(t), "integer %s is out of range", clip(string(t.text)))
			return nil, false
		}
		return n, true
	}
	f, err := strconv.ParseFloat(string(t.text), 64)
	switch {
	case errors.Is(err, strconv.ErrRange):
		p.errorf(p.pos(t), "number %s is out of the float64 range", clip(string(t.text)))
		return nil, false
	case err != nil:
		p.errorf(p.pos(t), "malformed number %s", clip(string(t.text)))
		return nil, false
	}
	return f, true
}

// parseInt parses an optionally signed decimal integer without allocating. isInt reports
// whether b has the form of one; ok whether it also fits an int.
func parseInt(b []byte) (n int, isInt, ok bool) {
	neg := false
	if len(b) > 0 && (b[0] == '-' || b[0] == '+') {
		neg, b = b[0] == '-', b[1:]
	}
	if len(b) == 0 {
		return 0, false, false
	}
	var u uint64
	ok = true
	for _, c := range b {
		if !isDigit(c) {
			return 0, false, false
		}
		if u > (math.MaxUint64-9)/10 {
			ok = false
			continue
		}
		u = u*10 + uint64(c-'0')
	}
	switch {
	case !ok || (!neg && u > math.MaxInt64) || (neg && u > -math.MinInt64):
		return 0, true, false
	case neg:
		return int(-int64(u-1) - 1), true, true
	}
	return int(u), true, true
}

// parseInts parses [a,b,...] (possibly empty); what names the list in messages.
func (p *parser) parseInts(what string) ([]int, bool) {
	if _, ok := p.expect(tokLBrack, "'[' to start a list of ints"); !ok {
		return nil, false
	}
	xs := []int{}
	if p.peek().kind == tokRBrack {
		p.next()
		return xs, true
	}
	for {
		t := p.next()
		n, isInt, ok := parseInt(t.text)
		switch {
		case t.kind != tokNumber || !isInt:
			p.errorf(p.pos(t), "unexpected %s in the %s list, want an int", t.describe(), what)
			return nil, false
		case !ok:
			p.errorf(p.pos(t), "integer %s is out of range", clip(string(t.text)))
			return nil, false
		}
		if len(xs) == maxRank {
			p.errorf(p.pos(t), "the %s list has more than %d entries, the most dims a tensor may have", what, maxRank)
			return nil, false
		}
		xs = append(xs, n)
		switch t := p.next(); t.kind {
		case tokRBrack:
			return xs, true
		case tokComma:
		default:
			p.errorf(p.pos(t), "unexpected %s in the %s list, want ',' or ']'", t.describe(), what)
			return nil, false
		}
	}
}

// parseType parses DTYPE[dims] (a scalar is f32[]) and bounds its size.
func (p *parser) parseType() (ir.Type, bool) {
	t, ok := p.expect(tokIdent, "a type like f32[8,512]")
	if !ok {
		return ir.Type{}, false
	}
	dt, known := ir.ParseDType(string(t.text))
	if !known {
		p.errorf(p.pos(t), "unknown dtype %s%s", clip(string(t.text)), dtypeHint(string(t.text)))
		return ir.Type{}, false
	}
	if k := p.peek(); k.kind != tokLBrack {
		p.errorf(p.pos(k), "unexpected %s after dtype %s, want its dims in brackets, like %s[8,512] (a scalar is %s[])",
			k.describe(), dt, dt, dt)
		return ir.Type{}, false
	}
	dims, ok := p.parseInts("dims")
	if !ok {
		return ir.Type{}, false
	}
	typ := ir.Type{DType: dt, Shape: ir.Shape(dims)}
	return typ, p.checkSize(typ, p.pos(t), "type")
}

// checkSize reports a type with a non-positive dim, more than maxRank dims or more than
// maxElements elements.
func (p *parser) checkSize(t ir.Type, pos ir.Pos, what string) bool {
	if t.Shape.Rank() > maxRank {
		p.errorf(pos, "%s has %d dims, more than the %d a tensor may have", what, t.Shape.Rank(), maxRank)
		return false
	}
	n := int64(1)
	for _, d := range t.Shape {
		if d <= 0 {
			p.errorf(pos, "%s %s has a dim that is not positive", what, clip(t.String()))
			return false
		}
		if int64(d) > maxElements/n {
			p.errorf(pos, "%s %s has more than 2^50 elements, beyond any cluster autopar can plan for", what, clip(t.String()))
			return false
		}
		n *= int64(d)
	}
	return true
}

// dtypeNames lists the dtypes in ir's order, read from ir so that a new dtype needs no
// change here.
func dtypeNames() []string {
	var names []string
	for d := ir.DType(1); d.Size() > 0; d++ {
		names = append(names, d.String())
	}
	return names
}

// dtypeHint suggests the closest dtype, or lists them all.
func dtypeHint(name string) string {
	if s := suggest(name, dtypeNames()); s != "" {
		return s
	}
	return " (want " + strings.Join(dtypeNames(), ", ") + ")"
}
