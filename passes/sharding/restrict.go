package sharding

import (
	"slices"

	"github.com/autopar/autopar/ir"
)

// restrict applies Options.Restrict after merging: in each group, only the strategies that
// pick, for every member Restrict names, a candidate of one of its names stay. A member
// none of whose names a candidate has is left free; a group none of whose strategies matches (merging
// kept another combination) keeps them all, so the ILP still chooses there.
// Merging and fusion are as without it, so a range of layers restricted to its layers'
// chosen strategies is priced as the range ILP prices that plan (compile.go's composed
// stages, issue 13).
func (p *planner) restrict() {
	if len(p.opts.Restrict) == 0 {
		return
	}
	for _, gr := range p.groups {
		want := make([][]int32, len(gr.members)) // per member: the named candidates, nil none
		named := false
		for mi, v := range gr.members {
			for _, name := range p.opts.Restrict[v] {
				if k := p.candidateNamed(v, name); k >= 0 && !slices.Contains(want[mi], k) {
					want[mi] = append(want[mi], k)
					named = true
				}
			}
		}
		if !named {
			continue
		}
		var keep []groupStrategy
		for _, gs := range gr.strats {
			ok := true
			for mi, ks := range want {
				ok = ok && (ks == nil || slices.Contains(ks, gs.pick[mi]))
			}
			if ok {
				keep = append(keep, gs)
			}
		}
		if len(keep) > 0 {
			gr.strats = keep
		}
	}
}

// candidateNamed is the index of v's candidate of that name, −1 when there is none.
func (p *planner) candidateNamed(v ir.ValueID, name string) int32 {
	for k := range p.cands[v] {
		if p.cands[v][k].Name == name {
			return int32(k)
		}
	}
	return -1
}
