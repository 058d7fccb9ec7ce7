package export

import (
	"fmt"
	"io"
	"strings"

	"github.com/autopar/autopar/mesh"
)

// Plan is what the exporters read: a compiled plan as plain data.
type Plan struct {
	Model        string // the model's name
	Source       string // where the plan came from (a file name), for the header; may be empty
	Batch        int    // samples per training step
	Microbatches int
	Schedule     string // 1f1b or gpipe
	Optimizer    Optimizer
	Stages       []Stage
}

// Optimizer is the optimizer the plan's training step updates with.
type Optimizer struct {
	Kind                            string // sgd or adam
	LR, Momentum, Beta1, Beta2, Eps float64
	WeightDecay                     float64
}

// Stage is one pipeline stage: its layers, its logical mesh and the values it holds.
type Stage struct {
	FirstLayer, LastLayer int
	Mesh                  [2]int // the logical mesh (n0, n1)
	// Devices are the stage's devices laid over the logical mesh row-major: the device
	// at mesh coordinate (i, j) is Devices[i*Mesh[1]+j].
	Devices []int
	// Recompute is set when the stage recomputes its activations in the backward;
	// RecomputeLayers when it does so layer by layer (each layer's input kept).
	Recompute, RecomputeLayers bool
	// Values are the values the stage holds, in the order of the training step. A
	// param, input or state several stages read is listed only by the stage that holds
	// it (the first to read it).
	Values []Value
}

// Role says what a value is to the user's training program.
type Role int

// The roles.
const (
	Param      Role = iota // a trained parameter
	Input                  // a data input: its batch dim is BatchDim
	State                  // optimizer state
	Activation             // a value the forward pass computes
	Backward               // a value of the backward pass or the update: the framework derives its layout
)

var roleNames = [...]string{"param", "input", "state", "activation", "backward"}

func (r Role) String() string {
	if r < 0 || int(r) >= len(roleNames) {
		return fmt.Sprintf("role(%d)", int(r))
	}
	return roleNames[r]
}

// Value is one value of a stage.
type Value struct {
	Name     string
	Op       string // the ir op that makes it (param, input, state, einsum, ...)
	Role     Role
	DType    string // f32, bf16, ...
	Shape    []int  // of one micro-batch
	BatchDim int    // of an Input, else -1
	Spec     mesh.Spec
	// Users are, for a param, the ops of the forward pass that read it, in graph order
	// without repeats (gather, einsum): what the Megatron export reads the model's
	// embeddings and MLP width from.
	Users []string
	// AlsoOn lists the other stages that read a param, input or state, each with the
	// spec it has there (a tied embedding read again by the last stage).
	AlsoOn []Use
}

// Use is a leaf read on a stage that does not hold it.
type Use struct {
	Stage int
	Spec  mesh.Spec
}

// Type writes the value's type as the .ir format does: f32[8,16].
func (v *Value) Type() string {
	parts := make([]string, len(v.Shape))
	for i, d := range v.Shape {
		parts[i] = fmt.Sprint(d)
	}
	return v.DType + "[" + strings.Join(parts, ",") + "]"
}

// A Format is one of the exporters.
type Format int

// The formats.
const (
	JAX Format = iota
	DTensor
	Megatron
)

// Formats lists the formats by name.
var Formats = []string{"jax", "dtensor", "megatron"}

func (f Format) String() string {
	if f < 0 || int(f) >= len(Formats) {
		return fmt.Sprintf("format(%d)", int(f))
	}
	return Formats[f]
}

// ParseFormat reads a format's name: jax, dtensor or megatron.
func ParseFormat(name string) (Format, error) {
	for i, n := range Formats {
		if strings.EqualFold(name, n) {
			return Format(i), nil
		}
	}
	return 0, fmt.Errorf("export: unknown format %q, expected one of %s", name, strings.Join(Formats, ", "))
}

// Write writes plan p in format f. Nothing is written when the plan cannot be exported
// (a Megatron-inexpressible plan, an invalid plan).
func Write(w io.Writer, p *Plan, f Format) error {
	if err := p.Validate(); err != nil {
		return err
	}
	var text string
	var err error
	switch f {
	case JAX:
		text, err = jaxModule(p)
	case DTensor:
		text, err = dtensorModule(p)
	case Megatron:
		text, err = megatronArgs(p)
	default:
		return fmt.Errorf("export: unknown format %d", int(f))
	}
	if err != nil {
		return err
	}
	_, err = io.WriteString(w, text)
	return err
}

// Validate checks what the exporters rely on: every stage's devices cover its logical
// mesh, and every spec fits its value's rank and uses each mesh axis once.
func (p *Plan) Validate() error {
	if len(p.Stages) == 0 {
		return fmt.Errorf("export: plan of %s has no stages", p.Model)
	}
	if p.Batch < 1 || p.Microbatches < 1 || p.Batch%p.Microbatches != 0 {
		return fmt.Errorf("export: batch %d in %d micro-batches", p.Batch, p.Microbatches)
	}
	for i, s := range p.Stages {
		if s.Mesh[0] < 1 || s.Mesh[1] < 1 || s.Mesh[0]*s.Mesh[1] != len(s.Devices) {
			return fmt.Errorf("export: stage %d: logical mesh (%d, %d) over %d devices", i, s.Mesh[0], s.Mesh[1], len(s.Devices))
		}
		for _, v := range s.Values {
			if len(v.Spec.Dims) != len(v.Shape) {
				return fmt.Errorf("export: stage %d: value %s is %s but its spec %q has %d dims", i, v.Name, v.Type(), v.Spec, len(v.Spec.Dims))
			}
			if err := v.Spec.Validate(); err != nil {
				return fmt.Errorf("export: stage %d: value %s: %w", i, v.Name, err)
			}
			for _, u := range v.AlsoOn {
				if len(u.Spec.Dims) != len(v.Shape) || u.Spec.Validate() != nil || u.Stage < 0 || u.Stage >= len(p.Stages) {
					return fmt.Errorf("export: stage %d: value %s is read on stage %d as %q, which does not fit %s", i, v.Name, u.Stage, u.Spec, v.Type())
				}
			}
		}
	}
	return nil
}

// pyStr writes s as a Python string literal.
func pyStr(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `'`, `\'`, "\n", `\n`)
	return "'" + r.Replace(s) + "'"
}

// pyInts writes a Python tuple of ints: (0, 1), (3,), ().
func pyInts(xs []int) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprint(x)
	}
	if len(xs) == 1 {
		return "(" + parts[0] + ",)"
	}
	return "(" + strings.Join(parts, ", ") + ")"
}

// header is the comment block every format starts with, each line prefixed by prefix.
func header(p *Plan, what string) []string {
	src := "a plan"
	if p.Source != "" {
		src = p.Source
	}
	lines := []string{
		fmt.Sprintf("%s for model %s, exported by autopar from %s.", what, p.Model, src),
		fmt.Sprintf("Plan: batch %d in %d micro-batches (%s), %d pipeline stage(s):", p.Batch, p.Microbatches, p.Schedule, len(p.Stages)),
	}
	for i, s := range p.Stages {
		lines = append(lines, fmt.Sprintf("  stage %d: layers %d-%d on devices %s as logical mesh (%d, %d)",
			i, s.FirstLayer, s.LastLayer, deviceRange(s.Devices), s.Mesh[0], s.Mesh[1]))
	}
	return lines
}

// deviceRange writes 0-3 for consecutive devices, else the list.
func deviceRange(ds []int) string {
	consecutive := len(ds) > 0
	for i := 1; i < len(ds); i++ {
		consecutive = consecutive && ds[i] == ds[i-1]+1
	}
	if consecutive && len(ds) > 1 {
		return fmt.Sprintf("%d-%d", ds[0], ds[len(ds)-1])
	}
	parts := make([]string, len(ds))
	for i, d := range ds {
		parts[i] = fmt.Sprint(d)
	}
	return strings.Join(parts, ",")
}

// stageValue is a value with the stage that holds it.
type stageValue struct {
	stage int
	*Value
}

// valuesOf lists the values of the given role across stages, in stage order.
func (p *Plan) valuesOf(role Role) []stageValue {
	var out []stageValue
	for si := range p.Stages {
		for vi := range p.Stages[si].Values {
			if v := &p.Stages[si].Values[vi]; v.Role == role {
				out = append(out, stageValue{si, v})
			}
		}
	}
	return out
}
