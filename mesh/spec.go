package mesh

import (
	"fmt"
	"strings"
)

// An AxisSet is a set of logical mesh axes, a bitset: bit a is axis a.
type AxisSet uint8

// The four axis sets of a 2-D mesh.
const (
	AxesNone AxisSet = 0             // R: replicated
	Axis0    AxisSet = 1             // S0
	Axis1    AxisSet = 2             // S1
	AxesBoth AxisSet = Axis0 | Axis1 // S01: axis 0 major, axis 1 minor
)

// Has reports whether axis a is in the set. It panics if a is not 0 or 1.
func (s AxisSet) Has(a int) bool {
	mustAxis(a)
	return s&(1<<a) != 0
}

// Digits writes the axes as "", "0", "1" or "01".
func (s AxisSet) Digits() string {
	return [...]string{"", "0", "1", "01"}[s&AxesBoth]
}

// String writes the set as Alpa writes a dim: R, S0, S1 or S01.
func (s AxisSet) String() string {
	if s == AxesNone {
		return "R"
	}
	return "S" + s.Digits()
}

// A Spec says how a tensor is laid out on a logical mesh: Dims[d] is the set
// of mesh axes tensor dim d is split on, and Partial the axes over which each
// device holds a partial sum still to be reduced.
//
// A dim split on both axes (S01) is cut into n0*n1 blocks and device (i, j)
// holds block i*n1+j: axis 0 is major. A valid spec uses each axis at most
// once across Dims and Partial.
type Spec struct {
	Dims    []AxisSet
	Partial AxisSet
}

// Replicated returns the spec R…R of a rank-r tensor.
func Replicated(rank int) Spec { return Spec{Dims: make([]AxisSet, rank)} }

// String writes the spec in Alpa's notation, one R/S0/S1/S01 per dim,
// followed by "+P0", "+P1" or "+P01" when the value is partial: "S0R",
// "RS01", "RR+P1". A scalar is "" (or "+P0" and so on when partial).
// ParseSpec is its exact inverse.
func (s Spec) String() string {
	var b strings.Builder
	for _, d := range s.Dims {
		b.WriteString(d.String())
	}
	if s.Partial != AxesNone {
		b.WriteString("+P" + s.Partial.Digits())
	}
	return b.String()
}

// ParseSpec reads the notation String writes. It rejects anything else,
// including specs that use an axis twice.
func ParseSpec(text string) (Spec, error) {
	dims, partial, hasPartial := strings.Cut(text, "+P")
	var s Spec
	if hasPartial {
		p, ok := parseDigits(partial)
		if !ok || p == AxesNone {
			return Spec{}, fmt.Errorf("mesh: spec %q: partial must be +P0, +P1 or +P01", text)
		}
		s.Partial = p
	}
	for rest := dims; rest != ""; {
		d, n := parseDim(rest)
		if n == 0 {
			return Spec{}, fmt.Errorf("mesh: spec %q: expected R, S0, S1 or S01 at %q", text, rest)
		}
		s.Dims = append(s.Dims, d)
		rest = rest[n:]
	}
	if msg := s.problem(); msg != "" {
		return Spec{}, fmt.Errorf("mesh: spec %q: %s", text, msg)
	}
	return s, nil
}

// parseDim reads one dim at the start of text, returning the number of bytes
// it used (0 when there is none).
func parseDim(text string) (AxisSet, int) {
	for _, w := range []string{"S01", "S0", "S1", "R"} {
		if strings.HasPrefix(text, w) {
			d, _ := parseDigits(strings.TrimPrefix(w, "S"))
			if w == "R" {
				d = AxesNone
			}
			return d, len(w)
		}
	}
	return 0, 0
}

func parseDigits(text string) (AxisSet, bool) {
	for s := AxesNone; s <= AxesBoth; s++ {
		if s.Digits() == text {
			return s, true
		}
	}
	return 0, false
}

// MustParseSpec is ParseSpec for literals in code and tests; it panics on a
// malformed spec.
func MustParseSpec(text string) Spec {
	s, err := ParseSpec(text)
	if err != nil {
		panic(err)
	}
	return s
}

// Validate checks that no mesh axis is used twice across dims and partial.
func (s Spec) Validate() error {
	if msg := s.problem(); msg != "" {
		return fmt.Errorf("mesh: spec %s: %s", s, msg)
	}
	return nil
}

// valid is Validate() == nil without building the error: the resharding search asks it of
// every layout it reaches.
func (s Spec) valid() bool {
	used := s.Partial
	for _, a := range s.Dims {
		if a > AxesBoth || used&a != 0 {
			return false
		}
		used |= a
	}
	return s.Partial <= AxesBoth
}

// problem says what makes s invalid, or "" when it is valid.
func (s Spec) problem() string {
	used := s.Partial
	for d, a := range s.Dims {
		if a > AxesBoth || used&a != 0 {
			return fmt.Sprintf("dim %d reuses a mesh axis", d)
		}
		used |= a
	}
	if s.Partial > AxesBoth {
		return "partial axes out of range"
	}
	return ""
}

// Used returns every axis the spec splits or is partial on.
func (s Spec) Used() AxisSet {
	u := s.Partial
	for _, a := range s.Dims {
		u |= a
	}
	return u
}

// Equal reports whether two specs are the same layout.
func (s Spec) Equal(t Spec) bool {
	if s.Partial != t.Partial || len(s.Dims) != len(t.Dims) {
		return false
	}
	for i := range s.Dims {
		if s.Dims[i] != t.Dims[i] {
			return false
		}
	}
	return true
}

// clone returns a copy that shares no memory with s.
func (s Spec) clone() Spec {
	return Spec{Dims: append([]AxisSet(nil), s.Dims...), Partial: s.Partial}
}

// MarshalText writes the spec as String does, so plan.json shows "S0R+P1".
func (s Spec) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText reads what MarshalText writes.
func (s *Spec) UnmarshalText(text []byte) error {
	t, err := ParseSpec(string(text))
	if err != nil {
		return err
	}
	*s = t
	return nil
}
