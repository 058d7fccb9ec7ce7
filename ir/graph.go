package ir

import (
	"fmt"
	"regexp"
)

// ValueID indexes Graph.Values. Values are in topological order, so an operand's ID is always
// smaller than its user's.
type ValueID int32

// NoValue is the ValueID of nothing.
const NoValue ValueID = -1

// Value is one SSA value: the result of one op applied to earlier values.
type Value struct {
	Name  string
	Op    Op
	Args  []ValueID
	Attrs Attrs
	Type  Type
	Pos   Pos
	// Prov says what the value is to a training step (a gradient, optimizer state, ...) and
	// which value that is relative to; the zero Prov is a model value. See Role.
	Prov Prov
	// Block is the repeated block of the model (a transformer layer, ...) the value belongs
	// to, NoBlock for none. See Block.
	Block Block
}

// BatchDim is the batch dim of a data input, or -1.
func (v *Value) BatchDim() int {
	if v.Op != OpInput {
		return -1
	}
	return v.Attrs.Int("batch")
}

// Output marks a value the step returns (the loss, usually).
type Output struct {
	Value ValueID
	Pos   Pos
}

// Update says that Value is the new content of Target (a param or state) after the step: the
// optimizer's output. A training step graph has one per param and state tensor.
type Update struct {
	Target, Value ValueID
	Pos           Pos
}

// Graph is a model or a training step in SSA form.
type Graph struct {
	Name    string
	Values  []Value
	Outputs []Output
	Updates []Update

	names map[string]ValueID
}

// NewGraph returns an empty graph.
func NewGraph(name string) *Graph { return &Graph{Name: name, names: map[string]ValueID{}} }

var nameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.]*$`)

// ValidName reports whether s can name a value in the text format.
func ValidName(s string) bool { return nameRE.MatchString(s) }

// Value returns the value with the given ID. It panics if id is out of range.
func (g *Graph) Value(id ValueID) *Value {
	if id < 0 || int(id) >= len(g.Values) {
		panic(fmt.Sprintf("ir: value %d out of range (graph has %d)", id, len(g.Values)))
	}
	return &g.Values[id]
}

// Lookup finds a value by name.
func (g *Graph) Lookup(name string) (ValueID, bool) {
	g.index()
	id, ok := g.names[name]
	return id, ok
}

// index rebuilds the name index if a caller assembled Values by hand.
func (g *Graph) index() {
	if g.names != nil && len(g.names) == len(g.Values) {
		return
	}
	g.names = make(map[string]ValueID, len(g.Values))
	for i := range g.Values {
		g.names[g.Values[i].Name] = ValueID(i)
	}
}

// Declare adds a param, input or state of the given type. batch is the batch dim of an
// input, -1 for none (and for params and state).
func (g *Graph) Declare(op Op, name string, t Type, batch int, pos Pos) (ValueID, error) {
	if !op.IsLeaf() {
		panic("ir: Declare of non-leaf op " + op.String())
	}
	at := Attrs{}.With("type", t)
	if op == OpInput {
		at = at.With("batch", batch)
	} else if batch >= 0 {
		return NoValue, Errorf(pos, "%s %s: only data inputs have a batch dim", op, name)
	}
	return g.Append(op, name, nil, at, pos)
}

// Append applies op to args and appends the result under name, after checking the name,
// the operands, the attributes and the shape rule. Errors are positioned at pos.
func (g *Graph) Append(op Op, name string, args []ValueID, at Attrs, pos Pos) (ValueID, error) {
	g.index()
	if err := g.checkName(name, pos); err != nil {
		return NoValue, err
	}
	av := make([]Arg, len(args))
	for i, a := range args {
		if a < 0 || int(a) >= len(g.Values) {
			return NoValue, Errorf(pos, "%s: operand %d of %s is not a value of this graph", op, i, name)
		}
		av[i] = Arg{Name: g.Values[a].Name, Type: g.Values[a].Type}
	}
	t, at, err := InferType(op, av, at)
	if err != nil {
		return NoValue, &Error{Pos: pos, Msg: err.Error()}
	}
	id := ValueID(len(g.Values))
	g.Values = append(g.Values, Value{Name: name, Op: op, Args: append([]ValueID(nil), args...), Attrs: at, Type: t, Pos: pos})
	g.names[name] = id
	return id, nil
}

func (g *Graph) checkName(name string, pos Pos) error {
	if !ValidName(name) {
		return Errorf(pos, "%q is not a valid name: want a letter or _ then letters, digits, _ or .", name)
	}
	if prev, dup := g.names[name]; dup {
		return Errorf(pos, "%s is defined twice", name).WithNote(g.Values[prev].Pos, "first defined here")
	}
	return nil
}

// AddOutput marks id as returned by the step.
func (g *Graph) AddOutput(id ValueID, pos Pos) { g.Outputs = append(g.Outputs, Output{id, pos}) }

// AddUpdate records that value is target's content after the step. Verify checks the pair.
func (g *Graph) AddUpdate(target, value ValueID, pos Pos) {
	g.Updates = append(g.Updates, Update{target, value, pos})
}

// FreshName returns base if unused, else base.1, base.2, ...: passes name what they make.
func (g *Graph) FreshName(base string) string {
	g.index()
	if _, used := g.names[base]; !used {
		return base
	}
	for i := 1; ; i++ {
		n := fmt.Sprintf("%s.%d", base, i)
		if _, used := g.names[n]; !used {
			return n
		}
	}
}

// Leaves lists the values declared with op (OpParam, OpInput or OpState), in order.
func (g *Graph) Leaves(op Op) []ValueID {
	var out []ValueID
	for i := range g.Values {
		if g.Values[i].Op == op {
			out = append(out, ValueID(i))
		}
	}
	return out
}

// Users returns, for every value, the values that use it, in order.
func (g *Graph) Users() [][]ValueID {
	users := make([][]ValueID, len(g.Values))
	for i := range g.Values {
		for _, a := range g.Values[i].Args {
			users[a] = append(users[a], ValueID(i))
		}
	}
	return users
}

// ArgTypes returns the operand types of v.
func (g *Graph) ArgTypes(v *Value) []Type {
	ts := make([]Type, len(v.Args))
	for i, a := range v.Args {
		ts[i] = g.Values[a].Type
	}
	return ts
}

// Dims returns the dims signature of value id.
func (g *Graph) Dims(id ValueID) Dims {
	v := g.Value(id)
	return v.Op.Def().Dims(g.ArgTypes(v), v.Attrs, v.Type)
}

// FLOPs returns the FLOPs of value id.
func (g *Graph) FLOPs(id ValueID) float64 {
	v := g.Value(id)
	return v.Op.Def().FLOPs(g.ArgTypes(v), v.Attrs, v.Type)
}

// TotalFLOPs sums FLOPs over the graph.
func (g *Graph) TotalFLOPs() float64 {
	var f float64
	for i := range g.Values {
		f += g.FLOPs(ValueID(i))
	}
	return f
}

// Clone returns a deep copy, so a pass can rewrite a graph without touching its input.
func (g *Graph) Clone() *Graph {
	c := &Graph{Name: g.Name, Values: make([]Value, len(g.Values)),
		Outputs: append([]Output(nil), g.Outputs...), Updates: append([]Update(nil), g.Updates...)}
	for i, v := range g.Values {
		v.Args = append([]ValueID(nil), v.Args...)
		v.Attrs = append(Attrs(nil), v.Attrs...)
		v.Type.Shape = v.Type.Shape.Clone()
		c.Values[i] = v
	}
	c.index()
	return c
}
