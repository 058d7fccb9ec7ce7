package ir

// Verify checks every invariant of g and returns all the problems found, each positioned
// and naming the value at fault:
//   - values are in topological order and operands exist;
//   - names are valid and unique;
//   - each op's arity and attributes match its table row, and its type is what the shape
//     rule gives;
//   - a value's provenance is relative to a value of the graph, and its block is none or
//     a block number;
//   - outputs name values; updates pair a param or state with a value of the same type, at
//     most once per target.
//
// Verify runs after parsing and between passes (under --check and in tests).
func Verify(g *Graph) error {
	var errs ErrorList
	seen := make(map[string]ValueID, len(g.Values))
	for i := range g.Values {
		v := &g.Values[i]
		if e := verifyValue(g, ValueID(i), seen); e != nil {
			errs = append(errs, e)
		} else if e := verifyProv(g, ValueID(i)); e != nil {
			errs = append(errs, e)
		} else if e := verifyBlock(g, ValueID(i)); e != nil {
			errs = append(errs, e)
		}
		if _, dup := seen[v.Name]; !dup {
			seen[v.Name] = ValueID(i)
		}
	}
	errs = append(errs, verifyOutputs(g)...)
	return errs.Err()
}

func verifyValue(g *Graph, id ValueID, seen map[string]ValueID) *Error {
	v := &g.Values[id]
	if v.Op <= OpInvalid || v.Op >= numOps {
		return Errorf(v.Pos, "%s: unknown op %d", v.Name, v.Op)
	}
	if !ValidName(v.Name) {
		return Errorf(v.Pos, "%q is not a valid name", v.Name)
	}
	if prev, dup := seen[v.Name]; dup {
		return Errorf(v.Pos, "%s is defined twice", v.Name).WithNote(g.Values[prev].Pos, "first defined here")
	}
	args := make([]Arg, len(v.Args))
	for i, a := range v.Args {
		if a < 0 || a >= id {
			return Errorf(v.Pos, "%s: operand %d refers to value %d, which is not defined before it", v.Name, i, a)
		}
		args[i] = Arg{g.Values[a].Name, g.Values[a].Type}
	}
	t, at, err := InferType(v.Op, args, v.Attrs)
	if err != nil {
		return Errorf(v.Pos, "%s: %v", v.Name, err)
	}
	if !at.Equal(v.Attrs) {
		return Errorf(v.Pos, "%s: attributes are not in canonical form", v.Name)
	}
	if !t.Equal(v.Type) {
		return Errorf(v.Pos, "%s: type is %s but %s gives %s", v.Name, v.Type, v.Op, t)
	}
	return nil
}

func verifyOutputs(g *Graph) ErrorList {
	var errs ErrorList
	valid := func(id ValueID) bool { return id >= 0 && int(id) < len(g.Values) }
	for _, o := range g.Outputs {
		if !valid(o.Value) {
			errs = append(errs, Errorf(o.Pos, "output refers to value %d, which does not exist", o.Value))
		}
	}
	updated := map[ValueID]Pos{}
	for _, u := range g.Updates {
		if !valid(u.Target) || !valid(u.Value) {
			errs = append(errs, Errorf(u.Pos, "update refers to a value that does not exist"))
			continue
		}
		t, v := &g.Values[u.Target], &g.Values[u.Value]
		switch {
		case t.Op != OpParam && t.Op != OpState:
			errs = append(errs, Errorf(u.Pos, "update target %s must be a param or state, is %s", t.Name, t.Op))
		case !t.Type.Equal(v.Type):
			errs = append(errs, Errorf(u.Pos, "update of %s: %s is %s but %s is %s", t.Name, t.Name, t.Type, v.Name, v.Type))
		}
		if prev, dup := updated[u.Target]; dup {
			errs = append(errs, Errorf(u.Pos, "%s is updated twice", t.Name).WithNote(prev, "first updated here"))
		}
		updated[u.Target] = u.Pos
	}
	return errs
}
