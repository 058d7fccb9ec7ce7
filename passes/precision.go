package passes

import (
	"fmt"
	"strconv"

	"github.com/autopar/autopar/ir"
)

// Precision says in which dtype a training step computes and whether it keeps f32 master
// weights. The zero value keeps the model's own dtypes.
type Precision struct {
	// Compute is the dtype of every float param and activation of the forward (and so of the
	// backward); Invalid keeps the dtypes the model declares.
	Compute ir.DType
	// Master keeps an f32 master copy of every f16 and bf16 param: the optimizer updates the
	// master in f32 and the param is its rounding, as Megatron-LM's and ZeRO's mixed
	// precision do. Without it a half param is updated in f32 and rounded back, and an update
	// smaller than half an ulp of the param is lost.
	Master bool
}

// The precisions --precision names. "" keeps the model's dtypes; "mixed" computes in bf16
// (what Megatron-LM uses on A100 and H100) with f32 master weights and optimizer state.
var precisions = []struct {
	name string
	p    Precision
}{
	{"", Precision{}},
	{"f32", Precision{Compute: ir.F32}},
	{"f16", Precision{Compute: ir.F16}},
	{"bf16", Precision{Compute: ir.BF16}},
	{"mixed", Precision{Compute: ir.BF16, Master: true}},
	{"mixed-f16", Precision{Compute: ir.F16, Master: true}},
}

// PrecisionNames lists the names ParsePrecision takes, but "" (the model's own dtypes).
func PrecisionNames() []string {
	var out []string
	for _, p := range precisions[1:] {
		out = append(out, p.name)
	}
	return out
}

// ParsePrecision reads a precision name: "" (the model's dtypes), "f32", "f16", "bf16"
// (every float of the model in that dtype; a half param is updated in f32 and rounded back),
// "mixed" (bf16 compute, f32 master weights and optimizer state) or "mixed-f16".
func ParsePrecision(s string) (Precision, error) {
	for _, p := range precisions {
		if p.name == s {
			return p.p, nil
		}
	}
	return Precision{}, fmt.Errorf("unknown precision %q, want one of %v", s, PrecisionNames())
}

// ConvertPrecision returns forward graph g computed in dtype dt: every float param
// declared in dt, every float data input cast to dt where it enters, every float constant,
// iota and cast computed in dt, and the other ops' dtypes inferred from their operands',
// but for batch_norm, kept in f32 between casts under a half dt (keepF32).
// The graph keeps its interface: inputs are fed and float outputs (the loss) returned in
// the dtypes g declares, through a cast. Params change dtype: their data is dt's. Value
// names are kept; the casts added get fresh ones. g is not modified.
func ConvertPrecision(g *ir.Graph, dt ir.DType) (*ir.Graph, error) {
	if !dt.IsFloat() {
		return nil, fmt.Errorf("precision: cannot compute in %s, want a float dtype", dt)
	}
	taken := map[string]bool{}
	for i := range g.Values {
		taken[g.Values[i].Name] = true
	}
	fresh := func(base string) string {
		name := base
		for k := 1; taken[name]; k++ {
			name = base + "." + strconv.Itoa(k)
		}
		taken[name] = true
		return name
	}
	out := ir.NewGraph(g.Name)
	id := make([]ir.ValueID, len(g.Values))
	for i := range g.Values {
		v := &g.Values[i]
		args := make([]ir.ValueID, len(v.Args))
		for k, a := range v.Args {
			args[k] = id[a]
		}
		if keepF32(v, dt) {
			nid, err := appendInF32(out, v, args, dt, fresh)
			if err != nil {
				return nil, fmt.Errorf("precision %s: %w", dt, err)
			}
			id[i] = nid
			continue
		}
		nid, err := out.Append(v.Op, v.Name, args, convertAttrs(v, dt), v.Pos)
		if err != nil {
			return nil, fmt.Errorf("precision %s: %w", dt, err)
		}
		out.Value(nid).Block = v.Block
		id[i] = nid
		if v.Op == ir.OpInput && v.Type.DType.IsFloat() && v.Type.DType != dt {
			if id[i], err = out.Append(ir.OpCast, fresh(v.Name+"."+dt.String()), []ir.ValueID{nid}, ir.Attrs{}.With("to", dt), v.Pos); err != nil {
				return nil, fmt.Errorf("precision %s: %w", dt, err)
			}
			out.Value(id[i]).Block = v.Block
		}
	}
	for _, o := range g.Outputs {
		nid := id[o.Value]
		if want := g.Value(o.Value).Type.DType; out.Value(nid).Type.DType != want {
			var err error
			if nid, err = out.Append(ir.OpCast, fresh(g.Value(o.Value).Name+"."+want.String()), []ir.ValueID{nid}, ir.Attrs{}.With("to", want), o.Pos); err != nil {
				return nil, fmt.Errorf("precision %s: %w", dt, err)
			}
			out.Value(nid).Block = g.Value(o.Value).Block
		}
		out.AddOutput(nid, o.Pos)
	}
	for _, u := range g.Updates {
		out.AddUpdate(id[u.Target], id[u.Value], u.Pos)
	}
	return out, nil
}

// keepF32 reports whether op v of an f32 model stays in f32 when the model computes in a
// half dtype dt: batch_norm, as cuDNN and autocast run it. Its gradient rule is written as
// ops in the op's dtype, dx = rstd·(g − mean(g) − x̂·mean(g·x̂)), whose differences cancel
// to nothing in a half dtype's 8 or 11 bits.
func keepF32(v *ir.Value, dt ir.DType) bool {
	return v.Op == ir.OpBatchNorm && (dt == ir.F16 || dt == ir.BF16) && v.Type.DType.IsFloat()
}

// appendInF32 appends v computed in f32 on f32 casts of its float operands (args, in the
// converted graph), and the cast of its result to dt under v's own name. A cast is in the
// block of the value it casts.
func appendInF32(out *ir.Graph, v *ir.Value, args []ir.ValueID, dt ir.DType, fresh func(string) string) (ir.ValueID, error) {
	to32 := ir.Attrs{}.With("to", ir.F32)
	in := make([]ir.ValueID, len(args))
	for k, a := range args {
		in[k] = a
		if t := out.Value(a).Type.DType; t.IsFloat() && t != ir.F32 {
			c, err := out.Append(ir.OpCast, fresh(out.Value(a).Name+".f32"), []ir.ValueID{a}, to32, v.Pos)
			if err != nil {
				return ir.NoValue, err
			}
			out.Value(c).Block = out.Value(a).Block
			in[k] = c
		}
	}
	r, err := out.Append(v.Op, fresh(v.Name+".f32"), in, v.Attrs, v.Pos)
	if err != nil {
		return ir.NoValue, err
	}
	out.Value(r).Block = v.Block
	c, err := out.Append(ir.OpCast, v.Name, []ir.ValueID{r}, ir.Attrs{}.With("to", dt), v.Pos)
	if err == nil {
		out.Value(c).Block = v.Block
	}
	return c, err
}

// convertAttrs returns v's attributes with the float dtypes it declares (a param's or
// state's type, a constant's or iota's, a cast's target) replaced by dt. A data input keeps
// its type: ConvertPrecision casts it after.
func convertAttrs(v *ir.Value, dt ir.DType) ir.Attrs {
	at := v.Attrs
	switch v.Op {
	case ir.OpParam, ir.OpState, ir.OpConstant, ir.OpIota:
		if t, ok := at.Get("type"); ok && t.(ir.Type).DType.IsFloat() {
			t := t.(ir.Type)
			at = at.With("type", ir.Type{DType: dt, Shape: t.Shape})
		}
	case ir.OpCast:
		if at.DType("to").IsFloat() {
			at = at.With("to", dt)
		}
	}
	return at
}

// ApplyPrecision is the "precision" phase: forward graph g converted to the compute dtype
// of opt's precision (ConvertPrecision); g itself when the precision keeps the model's
// dtypes. g is not modified.
func ApplyPrecision(g *ir.Graph, opt Optimizer) (*ir.Graph, error) {
	p, err := ParsePrecision(opt.Precision)
	if err != nil || p.Compute == ir.Invalid {
		return g, err
	}
	return ConvertPrecision(g, p.Compute)
}

// MasterSlot is the ir.Prov Slot of a master weight's remainder state (see updater.work).
const MasterSlot = "rem"

// MasterRemainders maps each master-weight remainder state of training step g (see
// updater.work: the state r in <p>.master = f32(p) + r, marked ir.RoleState of p with Slot
// MasterSlot) to its param. A remainder is part of its param's weight, not optimizer state
// of its own: compare it at the param's scale.
func MasterRemainders(g *ir.Graph) map[ir.ValueID]ir.ValueID {
	out := map[ir.ValueID]ir.ValueID{}
	for _, s := range g.Leaves(ir.OpState) {
		if p := g.Value(s).Prov; p.Role == ir.RoleState && p.Slot == MasterSlot && p.Of != ir.NoValue {
			out[s] = p.Of
		}
	}
	return out
}

// scaleLoss returns g with loss·s appended (a fresh "<loss>.scaled") for the backward to
// start from, and that value; g and loss themselves when s is 0 or 1. The graph's output
// stays the unscaled loss.
func scaleLoss(g *ir.Graph, loss ir.ValueID, s float64) (*ir.Graph, ir.ValueID) {
	if s == 0 || s == 1 {
		return g, loss
	}
	out := g.Clone()
	b := newBuilder(out)
	v := out.Value(loss)
	b.pos = v.Pos
	return out, b.emit(v.Name+".scaled", ir.OpMul, nil, loss, b.scalar(v.Type.DType, s))
}
