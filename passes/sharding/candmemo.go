package sharding

import (
	"context"
	"slices"
	"sync"

	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/mesh"
)

// CandidateMemo keeps the candidate strategies of recent (graph, mesh, cost model)
// triples, so that the many solves of one stage graph on one mesh (plain, relaxed,
// restricted, under other budgets, micro-batch counts or recomputation marks) enumerate
// and price them once: on GPT-1.3B's stages the enumeration was a fifth of the search's
// CPU. The strategies are a pure function of the key (candidates reads nothing else
// but Force and ForceSpec, whose solves bypass the memo), and the planner only reads
// them, so a shared copy yields the same ILP and the same plan. It holds at most
// candMemoSize entries, dropping the oldest, so that its memory stays a few graphs'.
// The zero value is ready; a nil *CandidateMemo computes every time.
type CandidateMemo struct {
	mu   sync.Mutex
	ents []*candEntry
	// strats keeps the strategies by value signature, for the graphs the entries do not
	// hold: the other graphs' values alike (stratcache.go).
	strats strategyCache
	// lags keeps MemoryBoundUntil's searches stopped at their callers' targets (lagkeep.go)
	lags lagKeep
}

type candKey struct {
	g         *ir.Graph
	shape     [2]int
	alpha     [2]float64
	beta      [2]float64
	devices   string
	cm        costModel
	fullConvs bool
	noMerge   bool
}

type candEntry struct {
	key   candKey
	cands [][]Strategy
	fu    *fusion

	mu     sync.Mutex
	groups []*groupBuild // the latest buildGroups results on cands, at most groupBuilds
}

// groupBuild is what buildGroups made of an entry's candidates under one weighing of the
// objective (weights.go): the groups, which the later passes filter (their strats are
// copied for each planner; the picks and members, which nothing changes once built, are
// shared).
type groupBuild struct {
	merge, noFill bool
	wB            float64
	update, acc   []bool
	groupOf       []int
	memberIdx     []int
	groups        []group
}

const groupBuilds = 4

const candMemoSize = 16

func candKeyOf(g *ir.Graph, lm *mesh.LogicalMesh, cm costModel, opts Options) candKey {
	devs := make([]byte, 0, 4*len(lm.Devices))
	for _, d := range lm.Devices {
		devs = append(devs, byte(d), byte(d>>8), byte(d>>16), byte(d>>24))
	}
	return candKey{g: g, shape: lm.Shape, alpha: lm.Alpha, beta: lm.Beta, devices: string(devs),
		cm: cm, fullConvs: opts.FullConvs, noMerge: opts.NoMerge}
}

// candidates is the package's candidates, through the memo when one is set and the
// solve forces nothing; it also returns the memo's entry (nil: none).
func (m *CandidateMemo) candidates(ctx context.Context, g *ir.Graph, lm *mesh.LogicalMesh, opts Options) ([][]Strategy, *fusion, *candEntry, error) {
	cm, err := opts.costModel()
	if m == nil || err != nil || len(opts.Force) > 0 || len(opts.ForceSpec) > 0 {
		cands, fu, err := candidates(ctx, g, lm, opts)
		return cands, fu, nil, err
	}
	k := candKeyOf(g, lm, cm, opts)
	m.mu.Lock()
	for _, e := range m.ents {
		if e.key == k {
			m.mu.Unlock()
			return e.cands, e.fu, e, nil
		}
	}
	m.mu.Unlock()
	cands, fu, err := candidatesCached(ctx, g, lm, opts, &m.strats)
	if err != nil {
		return nil, nil, nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, e := range m.ents {
		if e.key == k { // a concurrent solve got there first: keep one copy
			return e.cands, e.fu, e, nil
		}
	}
	if len(m.ents) == candMemoSize {
		copy(m.ents, m.ents[1:])
		m.ents = m.ents[:len(m.ents)-1]
	}
	e := &candEntry{key: k, cands: cands, fu: fu}
	m.ents = append(m.ents, e)
	return cands, fu, e, nil
}

// lookup returns the memo's candidates of (g, lm, opts) if it holds them, computing nothing.
func (m *CandidateMemo) lookup(g *ir.Graph, lm *mesh.LogicalMesh, opts Options) ([][]Strategy, bool) {
	cm, err := opts.costModel()
	if m == nil || err != nil {
		return nil, false
	}
	k := candKeyOf(g, lm, cm, opts)
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, e := range m.ents {
		if e.key == k {
			return e.cands, true
		}
	}
	return nil, false
}

// buildGroupsShared is buildGroups, taken from the planner's memo entry when an earlier
// planner built the groups of the same candidates under the same weights: buildGroups
// reads nothing else (Force and ForceSpec bypass the memo), so the groups are the same.
// The picks dominated the allocations of a build (each follower copies every pick).
func (p *planner) buildGroupsShared(merge bool) {
	e := p.candEnt
	if e == nil {
		p.buildGroups(merge)
		return
	}
	same := func(b *groupBuild) bool {
		return b.merge == merge && b.noFill == p.opts.noFill && b.wB == p.wB &&
			(p.wB == 1 || slices.Equal(b.update, p.opts.Update) && slices.Equal(b.acc, p.opts.Accumulated))
	}
	e.mu.Lock()
	for _, b := range e.groups {
		if same(b) {
			e.mu.Unlock()
			p.groupOf, p.memberIdx = b.groupOf, b.memberIdx
			p.groups = make([]*group, len(b.groups))
			for i := range b.groups {
				gr := b.groups[i]
				gr.strats = slices.Clone(gr.strats) // the later passes filter them in place
				p.groups[i] = &gr
			}
			return
		}
	}
	e.mu.Unlock()
	p.buildGroups(merge)
	b := &groupBuild{merge: merge, noFill: p.opts.noFill, wB: p.wB, groupOf: p.groupOf, memberIdx: p.memberIdx,
		groups: make([]group, len(p.groups))}
	if p.wB != 1 {
		b.update, b.acc = slices.Clone(p.opts.Update), slices.Clone(p.opts.Accumulated)
	}
	for i, gr := range p.groups {
		b.groups[i] = *gr
		b.groups[i].strats = slices.Clone(gr.strats)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.groups) == groupBuilds {
		copy(e.groups, e.groups[1:])
		e.groups = e.groups[:len(e.groups)-1]
	}
	e.groups = append(e.groups, b)
}
