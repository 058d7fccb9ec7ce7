package mesh

import (
	"fmt"
	"strings"
)

// A Step is one collective of a resharding.
type Step struct {
	Kind Collective `json:"kind"`
	Axes AxisSet    `json:"axes"`
	// Dim is the tensor dim sliced, gathered, scattered into, or (all-to-all)
	// taken from; -1 for an all-reduce.
	Dim int `json:"dim"`
	// ToDim is the dim an all-to-all moves the split to; -1 otherwise.
	ToDim int `json:"to_dim"`
	// Bytes is B of the alpha–beta formulas: the bytes of the tensor as held
	// by one group taking part (see reshardMoves), so sharding on the other
	// axis is already accounted for.
	Bytes float64 `json:"bytes"`
	Sent  float64 `json:"sent"`  // bytes each device sends, BytesSent(Kind, n, Bytes)
	Time  float64 `json:"time"`  // seconds, Cost(Kind, Axes, Bytes)
	After Spec    `json:"after"` // the layout once the step is done
}

// String writes the step as e.g. "all_to_all axes 1 dim 0->1 B=64 -> RS01".
func (s Step) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s axes %s", s.Kind, s.Axes.Digits())
	switch {
	case s.ToDim >= 0:
		fmt.Fprintf(&b, " dim %d->%d", s.Dim, s.ToDim)
	case s.Dim >= 0:
		fmt.Fprintf(&b, " dim %d", s.Dim)
	}
	fmt.Fprintf(&b, " B=%g -> %s", s.Bytes, s.After)
	return b.String()
}

// A Reshard is the cheapest way found to turn one layout into another.
type Reshard struct {
	Steps []Step  `json:"steps"`
	Time  float64 `json:"time"` // sum of the steps' Time
	Sent  float64 `json:"sent"` // sum of the steps' Sent: bytes per device
}

// ReshardCost returns the cheapest sequence of collectives on m that turns a
// tensor of the given global shape and element size laid out as from into
// the layout to, with its alpha–beta time and the bytes each device sends.
//
// The algorithm is a shortest path (Dijkstra) over every layout of the
// tensor: a layout is where each of the two mesh axes sits (on one tensor
// dim, in the partial set, or unused), so there are (rank+2)² of them. The
// edges are the moves listed at reshardMoves, each priced by the alpha–beta
// model on the bytes its groups actually hold. Layouts whose split dims the
// mesh does not divide are skipped as intermediates. Ties go to fewer steps.
// The result is therefore exact with respect to that move set: no sequence of
// those collectives is cheaper. A collective-permute (e.g. S0S1 → S1S0 as one
// swap of blocks) is not in the set, as in Alpa; such layouts are reached
// through all-to-alls and may be priced above what a permute would cost.
//
// Each call is a fresh search of tens of microseconds (BenchmarkReshardCost);
// callers pricing many edges should memoize on (shape, elemBytes, from, to).
//
// from and to must be valid specs of len(shape) dims and divide shape (else a
// *NotDivisibleError naming the dim and axes, so the caller can fall back to
// a replicated dim). A partial target is allowed but reachable only from a
// source partial over a superset of its axes: collectives never create
// partial sums.
func ReshardCost(m *LogicalMesh, shape []int, elemBytes int, from, to Spec) (Reshard, error) {
	if elemBytes <= 0 {
		return Reshard{}, fmt.Errorf("mesh: element size must be positive, got %d", elemBytes)
	}
	for _, s := range []Spec{from, to} {
		if _, err := m.LocalShape(shape, s); err != nil {
			return Reshard{}, err
		}
	}
	g := newReshardGraph(m, shape, elemBytes)
	path, ok := g.shortest(from, to)
	if !ok {
		return Reshard{}, fmt.Errorf("mesh: no collectives turn %s into %s (partial sums cannot be created)", from, to)
	}
	r := Reshard{Steps: path}
	for _, s := range path {
		r.Time += s.Time
		r.Sent += s.Sent
	}
	return r, nil
}

// reshardGraph is the layout graph of one tensor on one mesh.
type reshardGraph struct {
	m         *LogicalMesh
	shape     []int
	elemBytes int
	memo      []memoBytes // by index
}

func newReshardGraph(m *LogicalMesh, shape []int, elemBytes int) *reshardGraph {
	n := (len(shape) + 2) * (len(shape) + 2)
	return &reshardGraph{m: m, shape: shape, elemBytes: elemBytes, memo: make([]memoBytes, n)}
}

// index numbers a layout by where each axis sits: 0 unused, 1 partial,
// 2+d on dim d.
func (g *reshardGraph) index(s Spec) int {
	pos := [2]int{}
	for a := range 2 {
		if s.Partial.Has(a) {
			pos[a] = 1
		}
		for d, x := range s.Dims {
			if x.Has(a) {
				pos[a] = 2 + d
			}
		}
	}
	return pos[0]*(len(g.shape)+2) + pos[1]
}

// bytes returns a device's bytes under s, or ok = false when s does not
// divide the shape. Results are memoized by layout index: the search asks
// for the same layouts many times.
func (g *reshardGraph) bytes(s Spec) (float64, bool) {
	i := g.index(s)
	if c := g.memo[i]; c.known {
		return c.bytes, c.ok
	}
	b, ok := 0.0, true
	for d, size := range g.shape {
		if size%g.m.AxisSize(s.Dims[d]) != 0 {
			ok = false
		}
	}
	if ok {
		b = float64(g.elemBytes)
		for d, size := range g.shape {
			b *= float64(size / g.m.AxisSize(s.Dims[d]))
		}
	}
	g.memo[i] = memoBytes{known: true, ok: ok, bytes: b}
	return b, ok
}

type memoBytes struct {
	known, ok bool
	bytes     float64
}

// shortest runs Dijkstra from from to to and returns the steps. The graph is
// tiny ((rank+2)² nodes), so the frontier is a plain scan, which also makes
// the tie-breaking obvious: lowest (time, steps), then lowest index.
func (g *reshardGraph) shortest(from, to Spec) ([]Step, bool) {
	src, dst := g.index(from), g.index(to)
	return pathTo(g.search(from, dst), src, dst)
}

// reshardLabel is a layout's label in the search: its best time and steps so far, the
// layout it is reached from and by which step; done once final.
type reshardLabel struct {
	time  float64
	steps int
	prev  int
	via   Step
	spec  Spec
	seen  bool
	done  bool
}

// search runs shortest's Dijkstra from from until layout dst is final, or (dst < 0)
// every layout it reaches is. A label once final never changes, and the layouts are
// taken in the same order whatever dst is, so a layout's final label is the same in a
// search that stops at it and in one that runs to the end.
func (g *reshardGraph) search(from Spec, dst int) []reshardLabel {
	return g.searchBy(from, dst, func(_ int, s Spec) []Step { return g.moves(s) })
}

// searchBy is search with the moves out of each layout (its index and spec) from moves.
func (g *reshardGraph) searchBy(from Spec, dst int, moves func(int, Spec) []Step) []reshardLabel {
	n := (len(g.shape) + 2) * (len(g.shape) + 2)
	labels := make([]reshardLabel, n)
	src := g.index(from)
	labels[src] = reshardLabel{spec: from.clone(), prev: -1, seen: true}
	for {
		u := -1
		for i := range labels {
			l := &labels[i]
			if l.seen && !l.done && (u < 0 || l.time < labels[u].time ||
				l.time == labels[u].time && l.steps < labels[u].steps) {
				u = i
			}
		}
		if u < 0 {
			return labels
		}
		labels[u].done = true
		if u == dst {
			return labels
		}
		for _, st := range moves(u, labels[u].spec) {
			v, t := g.index(st.After), labels[u].time+st.Time
			l := &labels[v]
			if l.done {
				continue
			}
			if !l.seen || t < l.time || t == l.time && labels[u].steps+1 < l.steps {
				*l = reshardLabel{time: t, steps: labels[u].steps + 1, prev: u, via: st, spec: st.After, seen: true}
			}
		}
	}
}

// pathTo reads the steps from src to dst off search's labels (false: dst not reached).
func pathTo(labels []reshardLabel, src, dst int) ([]Step, bool) {
	if !labels[dst].done {
		return nil, false
	}
	path := make([]Step, 0, labels[dst].steps)
	for v := dst; v != src; v = labels[v].prev {
		path = append(path, labels[v].via)
	}
	for i, j := 0, len(path)-1; i < j; i, j = i+1, j-1 {
		path[i], path[j] = path[j], path[i]
	}
	return path, true
}

// A ReshardSource answers ReshardCost from one layout to any other out of one search run
// to the end: To(to) returns what ReshardCost(m, shape, elemBytes, from, to) returns,
// the same steps, time and bytes, at the price of a lookup. A caller pricing many
// targets of one source (the sharding planner's resharding memo) searches once. Its
// methods only read it: it may be shared.
type ReshardSource struct {
	m      *LogicalMesh
	shape  []int
	from   Spec
	g      *reshardGraph
	labels []reshardLabel
}

// NewReshardSource searches from from; its errors are ReshardCost's for elemBytes and
// from.
func NewReshardSource(m *LogicalMesh, shape []int, elemBytes int, from Spec) (*ReshardSource, error) {
	if elemBytes <= 0 {
		return nil, fmt.Errorf("mesh: element size must be positive, got %d", elemBytes)
	}
	if _, err := m.LocalShape(shape, from); err != nil {
		return nil, err
	}
	g := newReshardGraph(m, shape, elemBytes)
	return &ReshardSource{m: m, shape: shape, from: from.clone(), g: g, labels: g.search(from, -1)}, nil
}

// A ReshardTensor is the layout graph of one tensor on one mesh with every layout's moves
// listed once, up front, so that the searches from several of its layouts (Source) share
// them: the sharding planner prices a value's few layouts into the others out of one
// source each, and listing the moves was most of each search. Each layout's moves are
// moves' of that layout, in the same order, so a Source returns what NewReshardSource
// returns. Its methods only read it: it may be shared.
type ReshardTensor struct {
	g     *reshardGraph
	moves [][]Step // by layout index; nil where the layout does not divide the shape
}

// NewReshardTensor lists the moves of every layout of a tensor of the shape on m; its
// errors are NewReshardSource's for elemBytes.
func NewReshardTensor(m *LogicalMesh, shape []int, elemBytes int) (*ReshardTensor, error) {
	if elemBytes <= 0 {
		return nil, fmt.Errorf("mesh: element size must be positive, got %d", elemBytes)
	}
	g := newReshardGraph(m, shape, elemBytes)
	r := len(shape) + 2
	t := &ReshardTensor{g: g, moves: make([][]Step, r*r)}
	for i := range t.moves {
		// index's inverse: where axis 0 and axis 1 sit (0 unused, 1 partial, 2+d on dim d).
		s := Replicated(len(shape))
		for a, pos := range [2]int{i / r, i % r} {
			switch {
			case pos == 1:
				s.Partial |= AxisSet(1 << a)
			case pos >= 2:
				s.Dims[pos-2] |= AxisSet(1 << a)
			}
		}
		if !s.valid() || g.index(s) != i {
			continue
		}
		if _, ok := g.bytes(s); ok {
			t.moves[i] = g.moves(s)
		}
	}
	return t, nil
}

// Source is NewReshardSource(m, shape, elemBytes, from) of the tensor's mesh, shape and
// element size, searched over the listed moves.
func (t *ReshardTensor) Source(from Spec) (*ReshardSource, error) {
	g := t.g
	if _, err := g.m.LocalShape(g.shape, from); err != nil {
		return nil, err
	}
	labels := g.searchBy(from, -1, func(u int, _ Spec) []Step { return t.moves[u] })
	return &ReshardSource{m: g.m, shape: g.shape, from: from.clone(), g: g, labels: labels}, nil
}

// To is ReshardCost from the source's layout to to.
func (s *ReshardSource) To(to Spec) (Reshard, error) {
	if _, err := s.m.LocalShape(s.shape, to); err != nil {
		return Reshard{}, err
	}
	path, ok := pathTo(s.labels, s.g.index(s.from), s.g.index(to))
	if !ok {
		return Reshard{}, fmt.Errorf("mesh: no collectives turn %s into %s (partial sums cannot be created)", s.from, to)
	}
	r := Reshard{Steps: path}
	for _, st := range path {
		r.Time += st.Time
		r.Sent += st.Sent
	}
	return r, nil
}
