package mesh

// The moves of the resharding graph. For each axis set A — axis 0, axis 1,
// or both at once as one collective over the whole mesh, priced with the
// slower axis (AxisCost) — over groups of n = AxisSize(A) devices:
//
//	slice           R → S_A on dim d, or S0 → S01 (A = axis 1)      free
//	all_gather      S_A → R on dim d, or S01 → S0 (A = axis 1)      B = a device's bytes after
//	all_to_all      the split on A moves from dim d to dim e         B = a device's bytes × n
//	all_reduce      partial on A → not partial on A                  B = a device's bytes
//	reduce_scatter  partial on A → split on A on dim d               B = a device's bytes before
//
// B is always the tensor the group holds together, which is smaller than the
// global tensor when it is also split on the other axis. A dim split on both
// axes keeps axis 0 major, so only the minor axis 1 can be peeled off or
// added onto S0 in place: S1 → S01 or S01 → S1 would permute blocks across
// groups and is reached through other moves (e.g. gather then slice).

// canAdd reports whether a dim split on cur can be split further on a
// without moving data between groups.
func canAdd(cur, a AxisSet) bool {
	return cur == AxesNone || cur == Axis0 && a == Axis1
}

// canRemove reports whether a group along a holds, together, the block of a
// dim split on cur with a removed.
func canRemove(cur, a AxisSet) bool {
	return cur == a || cur == AxesBoth && a == Axis1
}

// moves lists every step out of layout s, in a fixed order.
func (g *reshardGraph) moves(s Spec) []Step {
	before, _ := g.bytes(s)
	var out []Step
	add := func(k Collective, a AxisSet, dim, toDim int, after Spec, groupBytes func(after float64) float64) {
		if !after.valid() {
			return
		}
		b, ok := g.bytes(after)
		if !ok {
			return
		}
		B := 0.0
		if k != Slice {
			B = groupBytes(b)
		}
		out = append(out, Step{
			Kind: k, Axes: a, Dim: dim, ToDim: toDim, After: after,
			Bytes: B, Sent: BytesSent(k, g.m.AxisSize(a), B), Time: g.m.Cost(k, a, B),
		})
	}
	n := func(a AxisSet) float64 { return float64(g.m.AxisSize(a)) }
	for _, a := range []AxisSet{Axis0, Axis1, AxesBoth} {
		if s.Partial&a == a {
			t := s.clone()
			t.Partial &^= a
			add(AllReduce, a, -1, -1, t, func(float64) float64 { return before })
		}
		for d, cur := range s.Dims {
			if canAdd(cur, a) {
				t := s.clone()
				t.Dims[d] |= a
				add(Slice, a, d, -1, t, nil)
				if s.Partial&a == a {
					t = t.clone()
					t.Partial &^= a
					add(ReduceScatter, a, d, -1, t, func(float64) float64 { return before })
				}
			}
			if !canRemove(cur, a) {
				continue
			}
			t := s.clone()
			t.Dims[d] &^= a
			add(AllGather, a, d, -1, t, func(after float64) float64 { return after })
			for e, other := range s.Dims {
				if e != d && canAdd(other, a) {
					u := t.clone()
					u.Dims[e] |= a
					add(AllToAll, a, d, e, u, func(float64) float64 { return before * n(a) })
				}
			}
		}
	}
	return out
}
