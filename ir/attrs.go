package ir

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// AttrKind is the type of an attribute's value.
type AttrKind uint8

// The attribute kinds and the Go type each is held as.
const (
	AttrInt    AttrKind = iota + 1 // int
	AttrInts                       // []int
	AttrFloat                      // float64
	AttrString                     // string
	AttrDType                      // DType
	AttrType                       // Type
)

var attrKindNames = [...]string{AttrInt: "an int", AttrInts: "a list of ints", AttrFloat: "a float",
	AttrString: "a string", AttrDType: "a dtype", AttrType: "a tensor type"}

func (k AttrKind) String() string { return attrKindNames[k] }

// AttrSpec declares one attribute of an op. An optional attribute with a non-nil Default takes
// it when absent; the printer omits an attribute equal to its default.
type AttrSpec struct {
	Name     string
	Kind     AttrKind
	Optional bool
	Default  any
}

// Attr is one attribute value; Value holds the Go type its kind names.
type Attr struct {
	Name  string
	Value any
}

// Attrs is an op's attributes, kept sorted by name so that equal attributes compare and print
// identically.
type Attrs []Attr

// With returns a copy of a with name set to value. value must be an int, []int, float64,
// string, DType or Type; other Go types panic.
func (a Attrs) With(name string, value any) Attrs {
	switch v := value.(type) {
	case int, float64, string, DType, Type:
	case []int:
		value = slices.Clone(v)
	case Shape:
		value = []int(slices.Clone(v))
	default:
		panic(fmt.Sprintf("ir: attribute %s has unsupported Go type %T", name, value))
	}
	out := make(Attrs, 0, len(a)+1)
	placed := false
	for _, at := range a {
		switch {
		case at.Name == name:
			continue
		case !placed && at.Name > name:
			out = append(out, Attr{name, value})
			placed = true
		}
		out = append(out, at)
	}
	if !placed {
		out = append(out, Attr{name, value})
	}
	return out
}

// Get returns the value of name.
func (a Attrs) Get(name string) (any, bool) {
	for _, at := range a {
		if at.Name == name {
			return at.Value, true
		}
	}
	return nil, false
}

func (a Attrs) must(name string) any {
	v, ok := a.Get(name)
	if !ok {
		panic("ir: missing attribute " + name)
	}
	return v
}

// Int returns an int attribute. It panics if name is absent or not an int: call it only on
// verified attributes.
func (a Attrs) Int(name string) int { return a.must(name).(int) }

// Ints returns a list attribute; same contract as Int.
func (a Attrs) Ints(name string) []int { return a.must(name).([]int) }

// Float returns a float attribute; same contract as Int.
func (a Attrs) Float(name string) float64 { return a.must(name).(float64) }

// String returns a string attribute; same contract as Int.
func (a Attrs) String(name string) string { return a.must(name).(string) }

// DType returns a dtype attribute; same contract as Int.
func (a Attrs) DType(name string) DType { return a.must(name).(DType) }

// Type returns a tensor-type attribute; same contract as Int.
func (a Attrs) Type(name string) Type { return a.must(name).(Type) }

// Equal reports whether two attribute lists hold the same values.
func (a Attrs) Equal(b Attrs) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Name != b[i].Name || FormatAttrValue(a[i].Value) != FormatAttrValue(b[i].Value) {
			return false
		}
	}
	return true
}

// kindOf returns the kind of a Go value held in an Attr.
func kindOf(v any) (AttrKind, bool) {
	switch v.(type) {
	case int:
		return AttrInt, true
	case []int:
		return AttrInts, true
	case float64:
		return AttrFloat, true
	case string:
		return AttrString, true
	case DType:
		return AttrDType, true
	case Type:
		return AttrType, true
	}
	return 0, false
}

// FormatAttrValue prints a value in the .ir syntax: 3, [1,2], 0.5, "bmk,bkn->bmn", f16,
// f32[4,4]. Floats print in the shortest form that parses back to the same float64.
func FormatAttrValue(v any) string {
	switch v := v.(type) {
	case int:
		return strconv.Itoa(v)
	case []int:
		return Shape(v).String()
	case float64:
		return formatFloat(v)
	case string:
		return strconv.Quote(v)
	case DType:
		return v.String()
	case Type:
		return v.String()
	}
	return fmt.Sprintf("?%T", v)
}

func formatFloat(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	case math.IsNaN(f):
		return "nan"
	}
	s := strconv.FormatFloat(f, 'g', -1, 64)
	if !strings.ContainsAny(s, ".eEn") {
		s += ".0" // keep floats visibly floats: 1.0, not 1
	}
	return s
}

// checkAttrs validates a against the op's specs and returns a with defaults filled in.
func checkAttrs(def *OpDef, a Attrs) (Attrs, error) {
	for _, at := range a {
		spec := def.attrSpec(at.Name)
		if spec == nil {
			return nil, fmt.Errorf("%s: unknown attribute %s%s", def.Name, at.Name, def.attrHint())
		}
		if k, _ := kindOf(at.Value); k != spec.Kind {
			return nil, fmt.Errorf("%s: attribute %s wants %s, got %s", def.Name, at.Name, spec.Kind, FormatAttrValue(at.Value))
		}
	}
	for _, spec := range def.Attrs {
		if _, ok := a.Get(spec.Name); ok {
			continue
		}
		switch {
		case spec.Default != nil:
			a = a.With(spec.Name, spec.Default)
		case !spec.Optional:
			return nil, fmt.Errorf("%s: missing attribute %s (%s)", def.Name, spec.Name, spec.Kind)
		}
	}
	return a, nil
}
