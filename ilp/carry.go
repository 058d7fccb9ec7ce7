package ilp

import (
	"cmp"
	"hash/maphash"
	"math"
	"slices"
)

// Bases carried by name (issue 13, branch basis). A stage's ILP solved at another
// micro-batch count is nearly the same problem — the same values and strategies, a few
// strategies more or fewer where a shape stops dividing — but not the same size, so
// Options.Start, which needs the earlier problem as a prefix, cannot describe it. A
// NamedBasis remembers each status under its variable's or row's name; For gives a new
// problem the status of every name it shares with the earlier one, and what the earlier
// one lacked starts as a cold solve would (slack basic, variable at a bound). Like every
// start it changes lp_solve's path, not what Solve proves.

// NamedBasis is a basis of one problem kept by the names of its variables and rows. Only
// the entries a cold start would not give are kept — variables not at their lower bound,
// rows whose slack is not basic — by the hash of their names, sorted: a basis of a
// 15,000-variable layer costs some 50 KiB kept, and holds none of the problem's strings.
type NamedBasis struct {
	vars, rows named
}

// named is a sparse status list: hashes of names, ascending, and their statuses.
type named struct {
	keys   []uint64
	status []BasisStatus
}

// nameSeed hashes the names (fixed per process; a basis is carried within one).
var nameSeed = maphash.MakeSeed()

// keep returns the entries of names whose status is not cold, sorted by hash; a hash met
// twice (a name used twice, or a collision) is left out.
func keep(names func(int) string, status []BasisStatus, cold func(int) BasisStatus) named {
	type entry struct {
		key uint64
		s   BasisStatus
	}
	var es []entry
	for i, s := range status {
		if n := names(i); n != "" && s != cold(i) {
			es = append(es, entry{maphash.String(nameSeed, n), s})
		}
	}
	slices.SortFunc(es, func(a, b entry) int { return cmp.Compare(a.key, b.key) })
	var out named
	for i := 0; i < len(es); {
		j := i + 1
		for j < len(es) && es[j].key == es[i].key {
			j++
		}
		if j == i+1 {
			out.keys = append(out.keys, es[i].key)
			out.status = append(out.status, es[i].s)
		}
		i = j
	}
	return out
}

// of returns the kept status of name, ok false where it has none.
func (n named) of(name string) (BasisStatus, bool) {
	if name == "" {
		return 0, false
	}
	i, ok := slices.BinarySearch(n.keys, maphash.String(nameSeed, name))
	if !ok {
		return 0, false
	}
	return n.status[i], true
}

// Named keeps b, a basis of p, by p's names; nil when b is nil or not of p's size.
func (p *Problem) Named(b *Basis) *NamedBasis {
	if b == nil || len(b.Vars) != len(p.Vars) || len(b.Rows) != len(p.Rows) {
		return nil
	}
	return &NamedBasis{
		vars: keep(func(j int) string { return p.Vars[j].Name }, b.Vars, func(j int) BasisStatus { return bound(p.Vars[j], AtLower) }),
		rows: keep(func(i int) string { return p.Rows[i].Name }, b.Rows, func(int) BasisStatus { return Basic }),
	}
}

// For returns a basis of p: the kept status of each variable and row p names as the
// earlier problem did, a cold start's for the others, and then as many basic entries as
// p has rows (extend's count), by making the last basic variables nonbasic or the last
// nonbasic rows' slacks basic. The result need not be a nonsingular or feasible basis;
// lp_solve refactors and repairs any start it is given. nil when nb is nil.
func (nb *NamedBasis) For(p *Problem) *Basis {
	if nb == nil {
		return nil
	}
	b := &Basis{Vars: make([]BasisStatus, len(p.Vars)), Rows: make([]BasisStatus, len(p.Rows))}
	basic := 0
	for i, r := range p.Rows {
		s, ok := nb.rows.of(r.Name)
		if !ok {
			s = Basic
		}
		b.Rows[i] = s
		if s == Basic {
			basic++
		}
	}
	for j, v := range p.Vars {
		s, ok := nb.vars.of(v.Name)
		if !ok || s != Basic {
			s = bound(v, s)
		}
		b.Vars[j] = s
		if s == Basic {
			basic++
		}
	}
	for j := len(b.Vars) - 1; j >= 0 && basic > len(b.Rows); j-- {
		if b.Vars[j] == Basic {
			b.Vars[j] = bound(p.Vars[j], AtLower)
			basic--
		}
	}
	for i := len(b.Rows) - 1; i >= 0 && basic < len(b.Rows); i-- {
		if b.Rows[i] != Basic {
			b.Rows[i] = Basic
			basic++
		}
	}
	return b
}

// bound is the nonbasic status of v nearest s that names a finite bound where v has one.
func bound(v Var, s BasisStatus) BasisStatus {
	if s == AtUpper && !math.IsInf(v.Hi, 1) || math.IsInf(v.Lo, -1) && !math.IsInf(v.Hi, 1) {
		return AtUpper
	}
	return AtLower
}
