package frontend

import (
	"strings"

	"github.com/autopar/autopar/ir"
)

// lineProv is what is written after a line's attributes: the block (block=3) and the
// provenance (role=grad of=w slot=m), as ir.Print writes them.
type lineProv struct {
	set              bool
	role             ir.Role
	of               *pendingRef // resolved once the whole file is read: Of may come later
	slot             string
	rolePos          ir.Pos
	ofSeen, slotSeen bool
	// block is the value's block=N (ir.NoBlock when not written); blockPos where it was.
	block    ir.Block
	blockPos ir.Pos
}

// pendingProv is a value's provenance whose of= name waits for the end of the file.
type pendingProv struct {
	id ir.ValueID
	of pendingRef
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

// provAttr parses the value of one provenance word, whose name token and '=' the caller
// consumed. Each value is a bare word: a role name, a value's name, a slot.
func (p *parser) provAttr(nameTok token) bool {
	name, pos := string(nameTok.text), p.pos(nameTok)
	t, ok := p.expect(tokIdent, "a name after "+name+"=")
	if !ok {
		return false
	}
	word, lp := string(t.text), &p.prov
	seen := map[string]*bool{"role": &lp.set, "of": &lp.ofSeen, "slot": &lp.slotSeen}[name]
	if *seen {
		p.errorf(pos, "%s is given twice", name)
		return false
	}
	switch name {
	case "role":
		r, known := ir.ParseRole(word)
		if !known || r == ir.RoleForward {
			p.errorf(p.pos(t), "unknown role %s, want one of %s", clip(word), roleList())
			return false
		}
		lp.role, lp.rolePos = r, pos
	case "of":
		lp.of = &pendingRef{word, p.pos(t)}
	case "slot":
		lp.slot = word
	}
	*seen = true
	return true
}

// blockAttr parses the value of block=, whose name token and '=' the caller consumed: a
// block number from 1 (see ir.Block).
func (p *parser) blockAttr(nameTok token) bool {
	pos, lp := p.pos(nameTok), &p.prov
	if lp.block != ir.NoBlock {
		p.errorf(pos, "%s is given twice", ir.BlockAttr).WithNote(lp.blockPos, "first given here")
		return false
	}
	t, ok := p.expect(tokNumber, "a block number after "+ir.BlockAttr+"=")
	if !ok {
		return false
	}
	n, isInt, fits := parseInt(t.text)
	switch {
	case !isInt:
		p.errorf(p.pos(t), "block %s is not an integer: blocks are numbered 1, 2, ...", clip(string(t.text)))
		return false
	case !fits:
		p.errorf(p.pos(t), "block %s is out of range: blocks are numbered from 1 to %d", clip(string(t.text)), ir.MaxBlock)
		return false
	}
	if err := ir.CheckBlock(int64(n)); err != nil {
		p.errorf(p.pos(t), "%v", err)
		return false
	}
	lp.block, lp.blockPos = ir.Block(n), pos
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

// applyProv sets the block and the provenance parsed on the current line on value id; the
// value it is of is set by resolveProvs.
func (p *parser) applyProv(id ir.ValueID, at ir.Pos) bool {
	lp := p.prov
	p.prov = lineProv{}
	p.g.Value(id).Block = lp.block
	if !lp.set {
		if lp.ofSeen || lp.slotSeen {
			p.errorf(at, "of= and slot= say whose a value is and need role= too")
			return false
		}
		return true
	}
	p.g.SetProv(id, ir.Prov{Role: lp.role, Of: ir.NoValue, Slot: lp.slot})
	if lp.of != nil {
		p.provs = append(p.provs, pendingProv{id, *lp.of})
	}
	return true
}

// resolveProvs sets the of= value of every provenance, checked as ir.Verify checks it.
func (p *parser) resolveProvs() {
	for _, pp := range p.provs {
		of, ok := p.lookupRef(pp.of)
		if !ok {
			continue
		}
		pr := p.g.Values[pp.id].Prov
		pr.Of = of
		if err := ir.CheckProv(p.g, pp.id, pr); err != nil {
			p.errorf(pp.of.pos, "%s %v", p.g.Values[pp.id].Name, err)
			continue
		}
		p.g.SetProv(pp.id, pr)
	}
}
