package ir

import (
	"fmt"
	"strings"
)

// Category groups ops into the families of the table's sections. Downstream passes read the
// row's own facts (Partial, Heavy, Follower), not the category.
type Category uint8

// The op categories.
const (
	CatLeaf        Category = iota + 1 // param, input, state, constant, iota
	CatElementwise                     // one output element per aligned input elements
	CatContraction                     // matmul, einsum
	CatReduce                          // reductions and row-wise normalizations
	CatLayout                          // moves data without arithmetic
	CatSpecial                         // gather, cross-entropy, conv, pooling and their grads
)

var categoryNames = [...]string{CatLeaf: "leaf", CatElementwise: "elementwise", CatContraction: "contraction",
	CatReduce: "reduce", CatLayout: "layout", CatSpecial: "special"}

func (c Category) String() string { return categoryNames[c] }

// Arg is what a shape rule sees of one operand: its name, for messages, and its type.
type Arg struct {
	Name string
	Type Type
}

// OpDef is one row of the op table.
type OpDef struct {
	Name     string
	Category Category
	// Arity is the number of operands; Variadic ops take Arity or more.
	Arity    int
	Variadic bool
	Attrs    []AttrSpec
	// Infer is the shape rule: the result type from the operands and attributes, or an error
	// naming the operand at fault ("matmul: inner dims differ: ..."). Attributes are checked
	// and defaulted before it runs. It also runs in the interpreter on local shards, so it
	// must not assume global shapes.
	Infer func(args []Arg, at Attrs) (Type, error)
	// Dims is the einsum-style dims signature of one instance (see Dims).
	Dims func(args []Type, at Attrs, res Type) Dims
	// FLOPs counts the floating-point operations of one instance.
	FLOPs func(args []Type, at Attrs, res Type) float64

	// Partial says how the op's results on the shards of a split contracted label (a label
	// of Dims in some operand but not in the result, and not Fixed) combine into the whole
	// result. PartialNone: such a split is not valid.
	Partial Partial
	// Heavy marks the ops that carry a model's FLOPs (contractions, convolutions): the
	// layer clustering counts them, and under Alpa's cost convention the sharding pass
	// never lets them replicate work on a mesh axis.
	Heavy bool
	// Follower marks the ops the sharding pass merges into their largest operand (Alpa's
	// followers): elementwise, reduction and row-wise ops, and the layout ops that only
	// rename dims.
	Follower bool
	// SyncStats is the number of per-channel statistics (each shaped like the result's dim
	// 1) the op takes over its batch, dim 0, of its first operand: batch_norm's mean and
	// variance. With dim 0 split, each is summed by an all-reduce over the split's axes
	// inside the op before it is used (synchronized batch norm): the sharding pass prices
	// them and codegen emits them. 0: a split dim 0 needs nothing of the op.
	SyncStats int
}

// Partial is how the results of one op on the shards of a split contracted label combine.
type Partial uint8

// The partial kinds.
const (
	// PartialNone: the op cannot run on shards of a contracted label.
	PartialNone Partial = iota
	// PartialSum: the results add up (contractions, sums, convolutions, scatter_add, gather
	// on a shard of its table's rows, masked: codegen/local.go); a sum-all-reduce or a
	// reduce-scatter finishes them. reduce_mean, run locally, is rescaled by its local over
	// global count first.
	PartialSum
	// PartialMax: the result is the elementwise max of the shards' results (reduce_max).
	// Finishing it needs a max all-reduce, which the program's instruction set does not
	// have (its all_reduce and reduce_scatter sum), so the sharding pass does not offer it
	// and codegen refuses it: see Lowerable.
	PartialMax
)

var partialNames = [...]string{PartialNone: "none", PartialSum: "sum", PartialMax: "max"}

func (p Partial) String() string { return partialNames[p] }

// Lowerable reports whether a partial of this kind can be finished by the collectives of
// the program's instruction set, which sum: the one statement of it that the sharding pass
// (which offers a contracted split only then) and codegen (which refuses any other) read.
func (p Partial) Lowerable() bool { return p == PartialSum }

func (d *OpDef) attrSpec(name string) *AttrSpec {
	for i := range d.Attrs {
		if d.Attrs[i].Name == name {
			return &d.Attrs[i]
		}
	}
	return nil
}

func (d *OpDef) attrHint() string {
	if len(d.Attrs) == 0 {
		return " (it takes none)"
	}
	names := make([]string, len(d.Attrs))
	for i, s := range d.Attrs {
		names[i] = s.Name
	}
	return " (it takes " + strings.Join(names, ", ") + ")"
}

// AttrSpec returns the spec of the named attribute, or nil.
func (d *OpDef) AttrSpec(name string) *AttrSpec { return d.attrSpec(name) }

// Def returns the op's row. It panics on an op outside the table.
func (o Op) Def() *OpDef {
	if o <= OpInvalid || o >= numOps {
		panic(fmt.Sprintf("ir: op %d is not in the table", uint8(o)))
	}
	return &opTable[o]
}

func (o Op) String() string {
	if o <= OpInvalid || o >= numOps {
		return fmt.Sprintf("op(%d)", uint8(o))
	}
	return opTable[o].Name
}

// IsLeaf reports whether o declares a graph input: param, input or state.
func (o Op) IsLeaf() bool { return o == OpParam || o == OpInput || o == OpState }

// AllOps lists every op in table order.
func AllOps() []Op {
	ops := make([]Op, 0, numOps-1)
	for o := OpInvalid + 1; o < numOps; o++ {
		ops = append(ops, o)
	}
	return ops
}

var opsByName = func() map[string]Op {
	m := make(map[string]Op, numOps)
	for o := OpInvalid + 1; o < numOps; o++ {
		m[opTable[o].Name] = o
	}
	return m
}()

// LookupOp returns the op with the given name.
func LookupOp(name string) (Op, bool) {
	o, ok := opsByName[name]
	return o, ok
}

// InferType checks the attributes of one op application, fills in their defaults and runs
// the shape rule. The error carries no position: callers add it.
func InferType(op Op, args []Arg, at Attrs) (Type, Attrs, error) {
	def := op.Def()
	if err := checkArity(def, len(args)); err != nil {
		return Type{}, nil, err
	}
	at, err := checkAttrs(def, at)
	if err != nil {
		return Type{}, nil, err
	}
	t, err := def.Infer(args, at)
	if err == nil {
		err = checkResultSize(def.Name, t)
	}
	return t, at, err
}

func checkArity(def *OpDef, n int) error {
	switch {
	case def.Variadic && n < def.Arity:
		return fmt.Errorf("%s: wants at least %d operands, got %d", def.Name, def.Arity, n)
	case !def.Variadic && n != def.Arity:
		return fmt.Errorf("%s: wants %d operand%s, got %d", def.Name, def.Arity, plural(def.Arity), n)
	}
	return nil
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
