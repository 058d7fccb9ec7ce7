package ir

import "strings"

// Shape rules of the layout ops and einsum.

func inferReshape(args []Arg, at Attrs) (Type, error) {
	x := args[0]
	s := Shape(at.Ints("shape"))
	for _, d := range s {
		if d <= 0 {
			return Type{}, errf("reshape", "shape %s has a dim that is not positive", s)
		}
	}
	if s.NumElements() != x.Type.Shape.NumElements() {
		return Type{}, errf("reshape", "cannot reshape %s of type %s (%d elements) to %s (%d elements)",
			x.Name, x.Type, x.Type.Shape.NumElements(), s, s.NumElements())
	}
	return Type{x.Type.DType, s.Clone()}, nil
}

func inferTranspose(args []Arg, at Attrs) (Type, error) {
	x := args[0]
	perm := at.Ints("perm")
	if !isPerm(perm, x.Type.Shape.Rank()) {
		return Type{}, errf("transpose", "perm %s is not a permutation of the %d dims of %s", Shape(perm), x.Type.Shape.Rank(), x.Name)
	}
	out := make(Shape, len(perm))
	for i, p := range perm {
		out[i] = x.Type.Shape[p]
	}
	return Type{x.Type.DType, out}, nil
}

func isPerm(p []int, n int) bool {
	if len(p) != n {
		return false
	}
	seen := make([]bool, n)
	for _, x := range p {
		if x < 0 || x >= n || seen[x] {
			return false
		}
		seen[x] = true
	}
	return true
}

// inferBroadcast follows XLA: dims[i] is the result dim that operand dim i maps to; the
// operand dim must equal that result dim or be 1.
func inferBroadcast(args []Arg, at Attrs) (Type, error) {
	x := args[0]
	s, dims := Shape(at.Ints("shape")), at.Ints("dims")
	if len(dims) != x.Type.Shape.Rank() {
		return Type{}, errf("broadcast", "dims %s must name one result dim for each of the %d dims of %s", Shape(dims), x.Type.Shape.Rank(), x.Name)
	}
	for i, d := range dims {
		if d < 0 || d >= len(s) || (i > 0 && d <= dims[i-1]) {
			return Type{}, errf("broadcast", "dims %s must be strictly increasing dims of the result %s", Shape(dims), s)
		}
		if n := x.Type.Shape[i]; n != s[d] && n != 1 {
			return Type{}, errf("broadcast", "dim %d of %s is %d, cannot broadcast to %d (dim %d of %s)", i, x.Name, n, s[d], d, s)
		}
	}
	for _, d := range s {
		if d <= 0 {
			return Type{}, errf("broadcast", "shape %s has a dim that is not positive", s)
		}
	}
	return Type{x.Type.DType, s.Clone()}, nil
}

func inferSlice(args []Arg, at Attrs) (Type, error) {
	x := args[0]
	start, limit := at.Ints("start"), at.Ints("limit")
	r := x.Type.Shape.Rank()
	if len(start) != r || len(limit) != r {
		return Type{}, errf("slice", "start and limit need %d entries each for %s of type %s", r, x.Name, x.Type)
	}
	out := make(Shape, r)
	for i := range out {
		if start[i] < 0 || start[i] >= limit[i] || limit[i] > x.Type.Shape[i] {
			return Type{}, errf("slice", "dim %d: [%d, %d) is not a non-empty range of 0..%d", i, start[i], limit[i], x.Type.Shape[i])
		}
		out[i] = limit[i] - start[i]
	}
	return Type{x.Type.DType, out}, nil
}

func inferConcat(args []Arg, at Attrs) (Type, error) {
	if err := sameDType("concat", args); err != nil {
		return Type{}, err
	}
	ax := at.Int("axis")
	if err := wantAxis("concat", args[0], ax); err != nil {
		return Type{}, err
	}
	out := args[0].Type.Shape.Clone()
	for _, a := range args[1:] {
		s := a.Type.Shape
		if s.Rank() != out.Rank() {
			return Type{}, errf("concat", "ranks differ: %s is %s but %s is %s", args[0].Name, args[0].Type, a.Name, a.Type)
		}
		for i := range s {
			if i != ax && s[i] != out[i] {
				return Type{}, errf("concat", "dim %d differs: %s is %s but %s is %s", i, args[0].Name, args[0].Type, a.Name, a.Type)
			}
		}
		out[ax] += s[ax]
	}
	return Type{args[0].Type.DType, out}, nil
}

// einsumSpec is a parsed "bmk,bkn->bmn".
type einsumSpec struct {
	operands []string
	result   string
}

func parseEinsum(spec string, n int) (einsumSpec, error) {
	lhs, rhs, ok := strings.Cut(spec, "->")
	if !ok {
		return einsumSpec{}, errf("einsum", "spec %q has no ->", spec)
	}
	es := einsumSpec{operands: strings.Split(lhs, ","), result: rhs}
	if len(es.operands) != n {
		return einsumSpec{}, errf("einsum", "spec %q names %d operands, got %d", spec, len(es.operands), n)
	}
	for _, s := range append(es.operands, rhs) {
		for i, c := range s {
			if c < 'a' || c > 'z' {
				return einsumSpec{}, errf("einsum", "spec %q: labels must be lowercase letters", spec)
			}
			if strings.IndexRune(s[i+1:], c) >= 0 {
				return einsumSpec{}, errf("einsum", "spec %q: label %c repeats within one tensor", spec, c)
			}
		}
	}
	return es, nil
}

func inferEinsum(args []Arg, at Attrs) (Type, error) {
	es, err := parseEinsum(at.String("spec"), len(args))
	if err != nil {
		return Type{}, err
	}
	if err := sameDType("einsum", args); err != nil {
		return Type{}, err
	}
	size := map[rune]int{}
	from := map[rune]string{}
	for i, a := range args {
		if len(es.operands[i]) != a.Type.Shape.Rank() {
			return Type{}, errf("einsum", "%s has rank %d but its labels are %q", a.Name, a.Type.Shape.Rank(), es.operands[i])
		}
		for j, c := range es.operands[i] {
			d := a.Type.Shape[j]
			if n, ok := size[c]; ok && n != d {
				return Type{}, errf("einsum", "label %c is %d in %s but %d in %s", c, n, from[c], d, a.Name)
			}
			size[c], from[c] = d, a.Name
		}
	}
	out := make(Shape, 0, len(es.result))
	for _, c := range es.result {
		n, ok := size[c]
		if !ok {
			return Type{}, errf("einsum", "result label %c appears in no operand", c)
		}
		out = append(out, n)
	}
	return Type{args[0].Type.DType, out}, nil
}
