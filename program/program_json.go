package program

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/autopar/autopar/ir"
)

// ProgramVersion is the version of the JSON form written by MarshalJSON. UnmarshalProgram
// reads it and version 1 (the form before blocks, which version 2 extends) and rejects any
// other: bump it whenever a field changes meaning.
const ProgramVersion = 2

// The JSON form: names for kinds, ops, dtypes and types, never table indices, so that the
// form survives a reordering of the op table. Fields at their zero value are left out, except
// that "out" is present exactly when the instruction defines a buffer.
type jsonProgram struct {
	Version      int               `json:"version"`
	Device       DeviceID          `json:"device"`
	Microbatches int               `json:"microbatches,omitempty"`
	Buffers      []jsonBuffer      `json:"buffers"`
	Instrs       []json.RawMessage `json:"instrs"`
	Blocks       []jsonBlock       `json:"blocks,omitempty"`
	Schedule     []jsonLoop        `json:"schedule,omitempty"`
}

type jsonBuffer struct {
	Name          string `json:"name"`
	Type          string `json:"type"`
	PerMicrobatch bool   `json:"per_microbatch,omitempty"`
}

type jsonBlock struct {
	Name          string `json:"name"`
	Start         int    `json:"start"`
	End           int    `json:"end"`
	PerMicrobatch bool   `json:"per_microbatch,omitempty"`
}

type jsonLoop struct {
	From int        `json:"from"`
	To   int        `json:"to"`
	Body []jsonCall `json:"body"`
}

type jsonCall struct {
	Block int `json:"block"`
	Shift int `json:"shift,omitempty"`
}

type jsonInstr struct {
	Kind       string                     `json:"kind"`
	Out        *BufferID                  `json:"out,omitempty"`
	Args       []BufferID                 `json:"args,omitempty"`
	Op         string                     `json:"op,omitempty"`
	Attrs      map[string]json.RawMessage `json:"attrs,omitempty"`
	Group      []DeviceID                 `json:"group,omitempty"`
	Axis       int                        `json:"axis,omitempty"`
	ConcatAxis int                        `json:"concat_axis,omitempty"`
	Peer       DeviceID                   `json:"peer,omitempty"`
	Tag        *jsonTag                   `json:"tag,omitempty"`
	Name       string                     `json:"name,omitempty"`
	Offsets    []int                      `json:"offsets,omitempty"`
	Stride     []int                      `json:"stride,omitempty"`
	Full       string                     `json:"full,omitempty"`
	Value      json.RawMessage            `json:"value,omitempty"`
	Note       string                     `json:"note,omitempty"`
}

type jsonTag struct {
	Value      string `json:"value"`
	MicroBatch int    `json:"micro_batch"`
}

// MarshalJSON writes the stable serialized form of p: byte-identical for equal programs,
// one buffer and one instruction per line so that diffs read well.
func (p *Program) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	fmt.Fprintf(&b, "{\"version\":%d,\"device\":%d,", ProgramVersion, p.Device)
	if len(p.Blocks) > 0 {
		fmt.Fprintf(&b, "\"microbatches\":%d,", p.Microbatches)
	}
	b.WriteString("\"buffers\":[")
	for i, d := range p.Buffers {
		line, err := json.Marshal(jsonBuffer{Name: d.Name, Type: d.Type.String(), PerMicrobatch: d.PerMicrobatch})
		if err != nil {
			return nil, err
		}
		writeListItem(&b, i, line)
	}
	b.WriteString("],\"instrs\":[")
	for i := range p.Instrs {
		line, err := json.Marshal(encodeInstr(&p.Instrs[i]))
		if err != nil {
			return nil, fmt.Errorf("program: instr %d: %w", i, err)
		}
		writeListItem(&b, i, line)
	}
	b.WriteString("\n]")
	if len(p.Blocks) > 0 {
		b.WriteString(",\"blocks\":[")
		for i, bl := range p.Blocks {
			line, err := json.Marshal(jsonBlock{Name: bl.Name, Start: bl.Start, End: bl.End, PerMicrobatch: bl.PerMicrobatch})
			if err != nil {
				return nil, err
			}
			writeListItem(&b, i, line)
		}
		b.WriteString("\n],\"schedule\":[")
		for i, l := range p.Schedule {
			jl := jsonLoop{From: l.From, To: l.To, Body: make([]jsonCall, len(l.Body))}
			for k, c := range l.Body {
				jl.Body[k] = jsonCall(c)
			}
			line, err := json.Marshal(jl)
			if err != nil {
				return nil, err
			}
			writeListItem(&b, i, line)
		}
		b.WriteString("\n]")
	}
	b.WriteString("}\n")
	return b.Bytes(), nil
}

func writeListItem(b *bytes.Buffer, i int, item []byte) {
	if i > 0 {
		b.WriteByte(',')
	}
	b.WriteString("\n  ")
	b.Write(item)
}

func encodeInstr(in *Instr) jsonInstr {
	j := jsonInstr{Kind: in.Kind.String(), Args: in.Args, Group: in.Group, Axis: in.Axis,
		ConcatAxis: in.ConcatAxis, Peer: in.Peer, Name: in.Name, Offsets: in.Offsets, Stride: in.Stride, Note: in.Note}
	if in.Out != NoBuffer {
		out := in.Out
		j.Out = &out
	}
	if in.Kind == Compute {
		j.Op = in.Op.String()
		if len(in.Attrs) > 0 {
			j.Attrs = make(map[string]json.RawMessage, len(in.Attrs))
			for _, a := range in.Attrs {
				j.Attrs[a.Name] = encodeAttr(a.Value)
			}
		}
	}
	if in.Tag != (Tag{}) {
		j.Tag = &jsonTag{Value: in.Tag.Value, MicroBatch: in.Tag.MicroBatch}
	}
	if in.Full.DType != ir.Invalid {
		j.Full = in.Full.String()
	}
	if in.Value != 0 || math.Signbit(in.Value) {
		j.Value = encodeFloat(in.Value)
	}
	return j
}

// encodeFloat writes a finite float as a JSON number in its shortest exact form and a
// non-finite one as the string "inf", "-inf" or "nan" (JSON has no such numbers).
func encodeFloat(f float64) json.RawMessage {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return json.RawMessage(strconv.Quote(ir.FormatAttrValue(f)))
	}
	return json.RawMessage(strconv.FormatFloat(f, 'g', -1, 64))
}

func decodeFloat(raw json.RawMessage) (float64, error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		switch s {
		case "inf":
			return math.Inf(1), nil
		case "-inf":
			return math.Inf(-1), nil
		case "nan":
			return math.NaN(), nil
		}
		return 0, fmt.Errorf("bad float %q, expected a number, \"inf\", \"-inf\" or \"nan\"", s)
	}
	var f float64
	err := json.Unmarshal(raw, &f)
	return f, err
}

func encodeAttr(v any) json.RawMessage {
	var raw []byte
	switch v := v.(type) {
	case float64:
		return encodeFloat(v)
	case ir.DType:
		raw, _ = json.Marshal(v.String())
	case ir.Type:
		raw, _ = json.Marshal(v.String())
	default: // int, []int, string: JSON has them
		var err error
		if raw, err = json.Marshal(v); err != nil {
			panic(fmt.Sprintf("program: attr value %T does not marshal: %v", v, err))
		}
	}
	return raw
}

// decodeAttr reads one attribute of op by the kind its table row declares.
func decodeAttr(op ir.Op, name string, raw json.RawMessage) (any, error) {
	spec := op.Def().AttrSpec(name)
	if spec == nil {
		return nil, fmt.Errorf("op %s has no attribute %q", op, name)
	}
	var err error
	switch spec.Kind {
	case ir.AttrInt:
		var v int
		err = json.Unmarshal(raw, &v)
		return v, err
	case ir.AttrInts:
		var v []int
		err = json.Unmarshal(raw, &v)
		return v, err
	case ir.AttrFloat:
		return decodeFloat(raw)
	case ir.AttrString:
		var v string
		err = json.Unmarshal(raw, &v)
		return v, err
	}
	var s string
	if err = json.Unmarshal(raw, &s); err != nil {
		return nil, err
	}
	if spec.Kind == ir.AttrDType {
		dt, ok := ir.ParseDType(s)
		if !ok {
			return nil, fmt.Errorf("unknown dtype %q", s)
		}
		return dt, nil
	}
	return ParseType(s)
}

// UnmarshalProgram reads the JSON form written by MarshalJSON. It checks the form (version,
// names of kinds, ops, dtypes, attributes), not the program: call Validate for that.
func UnmarshalProgram(data []byte) (*Program, error) {
	var j jsonProgram
	if err := json.Unmarshal(data, &j); err != nil {
		return nil, fmt.Errorf("program json: %w", err)
	}
	if j.Version != ProgramVersion && j.Version != 1 {
		return nil, fmt.Errorf("program json: unsupported version %d, expected %d", j.Version, ProgramVersion)
	}
	if j.Version == 1 && (j.Blocks != nil || j.Schedule != nil || j.Microbatches != 0) {
		return nil, fmt.Errorf("program json: version 1 has no blocks, schedule or micro-batches, expected version %d", ProgramVersion)
	}
	p := &Program{Device: j.Device, Microbatches: j.Microbatches, Buffers: make([]BufferDecl, len(j.Buffers)), Instrs: make([]Instr, len(j.Instrs))}
	for i, jb := range j.Buffers {
		t, err := ParseType(jb.Type)
		if err != nil {
			return nil, fmt.Errorf("program json: buffer %d: %w", i, err)
		}
		p.Buffers[i] = BufferDecl{Name: jb.Name, Type: t, PerMicrobatch: jb.PerMicrobatch}
	}
	for _, jb := range j.Blocks {
		p.Blocks = append(p.Blocks, Block(jb))
	}
	for _, jl := range j.Schedule {
		l := Loop{From: jl.From, To: jl.To, Body: make([]Call, len(jl.Body))}
		for k, c := range jl.Body {
			l.Body[k] = Call(c)
		}
		p.Schedule = append(p.Schedule, l)
	}
	for i, raw := range j.Instrs {
		if err := decodeInstr(raw, &p.Instrs[i]); err != nil {
			return nil, fmt.Errorf("program json: instr %d: %w", i, err)
		}
	}
	return p, nil
}

func decodeInstr(raw json.RawMessage, in *Instr) error {
	var j jsonInstr
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&j); err != nil {
		return err
	}
	kind, ok := ParseKind(j.Kind)
	if !ok {
		return fmt.Errorf("unknown instruction kind %q", j.Kind)
	}
	*in = Instr{Kind: kind, Out: NoBuffer, Args: j.Args, Group: j.Group, Axis: j.Axis,
		ConcatAxis: j.ConcatAxis, Peer: j.Peer, Name: j.Name, Offsets: j.Offsets, Stride: j.Stride, Note: j.Note}
	if j.Out != nil {
		in.Out = *j.Out
	}
	if j.Tag != nil {
		in.Tag = Tag{Value: j.Tag.Value, MicroBatch: j.Tag.MicroBatch}
	}
	var err error
	if j.Full != "" {
		if in.Full, err = ParseType(j.Full); err != nil {
			return err
		}
	}
	if j.Value != nil {
		if in.Value, err = decodeFloat(j.Value); err != nil {
			return err
		}
	}
	if j.Op != "" {
		if in.Op, ok = ir.LookupOp(j.Op); !ok {
			return fmt.Errorf("unknown op %q", j.Op)
		}
	}
	return decodeAttrs(in, j.Attrs)
}

// decodeAttrs fills in.Attrs in name order, the order ir keeps attributes in.
func decodeAttrs(in *Instr, attrs map[string]json.RawMessage) error {
	if len(attrs) > 0 && in.Op == ir.OpInvalid {
		return fmt.Errorf("attributes on an instruction without an op")
	}
	names := make([]string, 0, len(attrs))
	for name := range attrs {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		v, err := decodeAttr(in.Op, name, attrs[name])
		if err != nil {
			return fmt.Errorf("attribute %s: %w", name, err)
		}
		in.Attrs = in.Attrs.With(name, v)
	}
	return nil
}

// ParseType reads a tensor type in its printed form, "f32[8,512]" ("f32[]" for a scalar).
func ParseType(s string) (ir.Type, error) {
	open := strings.IndexByte(s, '[')
	if open < 0 || !strings.HasSuffix(s, "]") {
		return ir.Type{}, fmt.Errorf("bad type %q, expected dtype[dims] like f32[8,512]", s)
	}
	dt, ok := ir.ParseDType(s[:open])
	if !ok {
		return ir.Type{}, fmt.Errorf("bad type %q: unknown dtype %q", s, s[:open])
	}
	t := ir.Type{DType: dt}
	if inner := s[open+1 : len(s)-1]; inner != "" {
		for _, f := range strings.Split(inner, ",") {
			n, err := strconv.Atoi(f)
			if err != nil || n < 0 {
				return ir.Type{}, fmt.Errorf("bad type %q: dim %q is not a size", s, f)
			}
			t.Shape = append(t.Shape, n)
		}
	}
	return t, nil
}
