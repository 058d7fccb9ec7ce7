package frontend

import (
	"strings"

	"github.com/autopar/autopar/ir"
)

// lineProv is the provenance written after a line's attributes (role=grad of=w slot=m),
// as ir.Print writes it for the values passes make.
type lineProv struct {
	set      bool
	role     ir.Role
	of       ir.ValueID
	slot     string
	rolePos  ir.Pos
	ofGiven  bool
	slotSeen bool
}

// isProvAttr reports whether name is one of the provenance words ir.Print writes.
func isProvAttr(name string) bool {
	for _, n := range ir.ProvAttrs {
		if n == name {
			return true
		}
	}
	return false
}

// provAttr parses the value of one provenance word, whose name token the caller consumed
// with its '='. Each value is a bare word: a role name, an earlier value's name, a slot.
func (p *parser) provAttr(nameTok token) bool {
	name, pos := string(nameTok.text), p.pos(nameTok)
	t, ok := p.expect(tokIdent, "a name after "+name+"=")
	if !ok {
		return false
	}
	word := string(t.text)
	lp := &p.prov
	switch name {
	case "role":
		if lp.set {
			p.errorf(pos, "role is given twice")
			return false
		}
		r, known := ir.ParseRole(word)
		if !known || r == ir.RoleForward {
			p.errorf(p.pos(t), "unknown role %s, want one of %s", clip(word), roleList())
			return false
		}
		lp.set, lp.role, lp.rolePos = true, r, pos
	case "of":
		if lp.ofGiven {
			p.errorf(pos, "of is given twice")
			return false
		}
		id, found := p.resolve(t)
		if !found {
			return false
		}
		lp.of, lp.ofGiven = id, true
	case "slot":
		if lp.slotSeen {
			p.errorf(pos, "slot is given twice")
			return false
		}
		lp.slot, lp.slotSeen = word, true
	}
	return true
}

func roleList() string {
	var names []string
	for r := ir.RoleForward + 1; ; r++ {
		if _, ok := ir.ParseRole(r.String()); !ok {
			return strings.Join(names, ", ")
		}
		names = append(names, r.String())
	}
}

// applyProv sets the provenance parsed on the current line on value id.
func (p *parser) applyProv(id ir.ValueID, at ir.Pos) bool {
	lp := p.prov
	p.prov = lineProv{of: ir.NoValue}
	if !lp.set {
		if lp.ofGiven || lp.slotSeen {
			p.errorf(at, "of= and slot= say whose a value is and need role= too")
			return false
		}
		return true
	}
	pr := ir.Prov{Role: lp.role, Of: lp.of, Slot: lp.slot}
	if err := ir.CheckProv(id, pr); err != nil {
		p.errorf(lp.rolePos, "%s %s", p.g.Values[id].Name, err)
		return false
	}
	p.g.SetProv(id, pr)
	return true
}
