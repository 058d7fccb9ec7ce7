package zoo

import (
	"fmt"
	"slices"
	"strings"

	"github.com/autopar/autopar/ir"
)

// Param is one configuration knob of a model, exposed so a command line can turn every
// knob into a flag without knowing the model: exactly one of Int, Float and String is
// non-nil and points into the model's own config, so setting it changes what Build makes.
type Param struct {
	Name, Usage string
	Int         *int
	Float       *float64
	String      *string
	Bool        *bool
}

// Model is one configurable model of the zoo. Build returns the forward graph; its first
// output is the scalar training loss.
type Model interface {
	// Name is the zoo name ("gpt"), also the name of the graph Build makes.
	Name() string
	// Params lists the model's knobs in a fixed order; they alias the model's config.
	Params() []Param
	// Build checks the config and makes the graph. Config mistakes are errors naming the
	// knob and what it must be.
	Build() (*ir.Graph, error)
}

// models maps a zoo name to a constructor of the model with its default (small) config.
var models = map[string]func() Model{
	"gpt":     func() Model { return NewGPT() },
	"mlp":     func() Model { return NewMLP() },
	"moe":     func() Model { return NewMoE() },
	"wresnet": func() Model { return NewWResNet() },
}

// Names lists the zoo's models, sorted.
func Names() []string {
	names := make([]string, 0, len(models))
	for n := range models {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// New returns the named model with its default config. An unknown name is an error listing
// the names the zoo knows.
func New(name string) (Model, error) {
	mk, ok := models[name]
	if !ok {
		return nil, fmt.Errorf("unknown model %q, want one of %s", name, strings.Join(Names(), ", "))
	}
	return mk(), nil
}

// ParamCount is the number of trained scalars of g: the elements of every param.
func ParamCount(g *ir.Graph) int64 {
	var n int64
	for _, id := range g.Leaves(ir.OpParam) {
		n += g.Value(id).Type.Shape.NumElements()
	}
	return n
}

// knobs collects config mistakes so that Build reports the first one, naming the knob.
type knobs struct {
	model string
	err   error
}

func (k *knobs) fail(format string, args ...any) {
	if k.err == nil {
		k.err = fmt.Errorf(k.model+": "+format, args...)
	}
}

// positive checks that each named int is at least 1.
func (k *knobs) positive(vals ...any) {
	for i := 0; i+1 < len(vals); i += 2 {
		if v := vals[i+1].(int); v < 1 {
			k.fail("%s must be at least 1, got %d", vals[i].(string), v)
		}
	}
}

// divides checks that d divides n.
func (k *knobs) divides(nName string, n int, dName string, d int) {
	if d >= 1 && n%d != 0 {
		k.fail("%s %d is not divisible by %s %d", nName, n, dName, d)
	}
}

// dtype parses a float dtype name.
func (k *knobs) dtype(s string) ir.DType {
	dt, ok := ir.ParseDType(s)
	if !ok || !dt.IsFloat() {
		k.fail("dtype must be one of f32, f16, bf16, f64, got %q", s)
		return ir.F32
	}
	return dt
}

func intParam(name, usage string, p *int) Param { return Param{Name: name, Usage: usage, Int: p} }

func boolParam(name, usage string, p *bool) Param { return Param{Name: name, Usage: usage, Bool: p} }

func floatParam(name, usage string, p *float64) Param {
	return Param{Name: name, Usage: usage, Float: p}
}

func stringParam(name, usage string, p *string) Param {
	return Param{Name: name, Usage: usage, String: p}
}
