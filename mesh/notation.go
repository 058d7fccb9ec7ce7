package mesh

import (
	"fmt"
	"strings"
)

// A Notation is a way of writing a Spec for a human: Alpa's, which autopar uses
// everywhere, or the one a JAX or PyTorch user already reads.
type Notation int

// The notations.
const (
	// Alpa writes one entry per tensor dim: R, S0, S1 or S01, then +P0, +P1 or +P01
	// for the partial-sum axes ("S0R", "RS01+P0").
	Alpa Notation = iota
	// JAX writes a jax.sharding.PartitionSpec, one entry per tensor dim naming the
	// mesh axes it is split on (axis 0 is 'x', axis 1 is 'y'), with JAX's unreduced
	// axes for partial sums: P('x', None), P(None, ('x', 'y')), P(None, unreduced={'y'}).
	JAX
	// DTensor writes PyTorch DTensor placements, one per mesh axis: Shard(d) when the
	// axis splits tensor dim d, Partial() when the value is a partial sum over it,
	// else Replicate(): [Shard(0), Replicate()].
	DTensor
)

// Notations lists the notations by name, in the order the CLI documents them.
var Notations = []string{"alpa", "jax", "dtensor"}

// ParseNotation reads a notation's name: alpa, jax or dtensor.
func ParseNotation(name string) (Notation, error) {
	for i, n := range Notations {
		if strings.EqualFold(name, n) {
			return Notation(i), nil
		}
	}
	return 0, fmt.Errorf("notation %q: expected one of %s", name, strings.Join(Notations, ", "))
}

// String is the notation's name, as ParseNotation reads it.
func (n Notation) String() string {
	if n < 0 || int(n) >= len(Notations) {
		return fmt.Sprintf("notation(%d)", int(n))
	}
	return Notations[n]
}

// JAXAxisNames are the names the JAX notation and export give the two logical mesh
// axes: axis 0 (the slow one when a submesh spans hosts) is 'x', axis 1 is 'y'.
var JAXAxisNames = [2]string{"x", "y"}

// Format writes s in notation n. Every notation writes every spec: a scalar is "" in
// Alpa's, P() in JAX's and, like any spec, one placement per mesh axis in DTensor's.
// It panics on a notation other than the three.
func (n Notation) Format(s Spec) string {
	switch n {
	case Alpa:
		return s.String()
	case JAX:
		return s.JAX()
	case DTensor:
		return FormatPlacements(s.Placements())
	}
	panic(fmt.Sprintf("mesh: unknown notation %d", int(n)))
}

// JAX writes s as a jax.sharding.PartitionSpec expression, P(...), with the mesh axes
// named by JAXAxisNames. A dim split on both axes is the tuple ('x', 'y'): JAX, like
// autopar, makes the first axis of the tuple the major one. Partial axes are written
// as JAX's unreduced axes.
func (s Spec) JAX() string {
	parts := make([]string, 0, len(s.Dims)+1)
	for _, d := range s.Dims {
		parts = append(parts, jaxAxes(d))
	}
	if s.Partial != AxesNone {
		parts = append(parts, "unreduced={"+strings.Join(quotedAxes(s.Partial), ", ")+"}")
	}
	return "P(" + strings.Join(parts, ", ") + ")"
}

// jaxAxes writes one PartitionSpec entry: None, 'x', 'y' or ('x', 'y').
func jaxAxes(a AxisSet) string {
	q := quotedAxes(a)
	switch len(q) {
	case 0:
		return "None"
	case 1:
		return q[0]
	}
	return "(" + strings.Join(q, ", ") + ")"
}

func quotedAxes(a AxisSet) []string {
	var q []string
	for ax := range 2 {
		if a.Has(ax) {
			q = append(q, "'"+JAXAxisNames[ax]+"'")
		}
	}
	return q
}

// A PlacementKind is the kind of one DTensor placement.
type PlacementKind int

// The DTensor placement kinds.
const (
	Replicate PlacementKind = iota // Replicate(): every device along the axis holds it all
	Shard                          // Shard(d): the axis splits tensor dim d
	Partial                        // Partial(): a partial sum over the axis
)

// A Placement is what one mesh axis does to a tensor, as DTensor lists it.
type Placement struct {
	Kind PlacementKind
	Dim  int // the tensor dim, for Shard
}

// String writes the placement as PyTorch constructs it: Shard(1), Replicate(), Partial().
func (p Placement) String() string {
	switch p.Kind {
	case Shard:
		return fmt.Sprintf("Shard(%d)", p.Dim)
	case Partial:
		return "Partial()"
	}
	return "Replicate()"
}

// Placements converts s, one entry per tensor dim, to DTensor's placements, one per
// mesh axis of the 2-D logical mesh. A dim split on both axes (S01) becomes Shard(d) on
// both: DTensor splits along mesh axis 0 first and subdivides along axis 1, so device
// (i, j) holds block i*n1+j, which is autopar's S01 (axis 0 major). FromPlacements is
// its inverse. It panics on an invalid spec (an axis used twice); ParseSpec and
// UnmarshalText never return one.
func (s Spec) Placements() [2]Placement {
	if err := s.Validate(); err != nil {
		panic(err)
	}
	var out [2]Placement
	for ax := range 2 {
		if s.Partial.Has(ax) {
			out[ax] = Placement{Kind: Partial}
			continue
		}
		for d, a := range s.Dims {
			if a.Has(ax) {
				out[ax] = Placement{Kind: Shard, Dim: d}
			}
		}
	}
	return out
}

// FromPlacements converts DTensor placements, one per mesh axis of a 2-D mesh, to the
// spec of a rank-rank tensor. Shard(d) on both axes is S01 on dim d. A Shard dim
// outside the tensor or a placement list of another length is an error.
func FromPlacements(ps []Placement, rank int) (Spec, error) {
	if len(ps) != 2 {
		return Spec{}, fmt.Errorf("mesh: %d placements, expected 2 (one per logical mesh axis)", len(ps))
	}
	s := Replicated(rank)
	for ax, p := range ps {
		bit := AxisSet(1) << ax
		switch p.Kind {
		case Replicate:
		case Partial:
			s.Partial |= bit
		case Shard:
			if p.Dim < 0 || p.Dim >= rank {
				return Spec{}, fmt.Errorf("mesh: placement %s on mesh axis %d: a rank-%d tensor has dims 0 to %d", p, ax, rank, rank-1)
			}
			s.Dims[p.Dim] |= bit
		default:
			return Spec{}, fmt.Errorf("mesh: placement kind %d on mesh axis %d is not Replicate, Shard or Partial", int(p.Kind), ax)
		}
	}
	return s, nil
}

// FormatPlacements writes placements as a Python list: [Shard(0), Replicate()].
func FormatPlacements(ps [2]Placement) string {
	return "[" + ps[0].String() + ", " + ps[1].String() + "]"
}

// ParsePlacements reads what FormatPlacements writes, "[Shard(0), Replicate()]", with
// any spacing.
func ParsePlacements(text string) ([]Placement, error) {
	t := strings.TrimSpace(text)
	if !strings.HasPrefix(t, "[") || !strings.HasSuffix(t, "]") {
		return nil, fmt.Errorf("mesh: placements %q: expected a list [..., ...]", text)
	}
	var ps []Placement
	for _, item := range strings.Split(t[1:len(t)-1], ",") {
		item = strings.ReplaceAll(item, " ", "")
		var p Placement
		switch {
		case item == "Replicate()":
		case item == "Partial()":
			p.Kind = Partial
		case strings.HasPrefix(item, "Shard(") && strings.HasSuffix(item, ")"):
			if _, err := fmt.Sscanf(item, "Shard(%d)", &p.Dim); err != nil || fmt.Sprintf("Shard(%d)", p.Dim) != item {
				return nil, fmt.Errorf("mesh: placements %q: bad %q, expected Shard(DIM)", text, item)
			}
			p.Kind = Shard
		default:
			return nil, fmt.Errorf("mesh: placements %q: %q is not Shard(d), Replicate() or Partial()", text, item)
		}
		ps = append(ps, p)
	}
	return ps, nil
}
