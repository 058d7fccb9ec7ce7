package sharding

import (
	"context"
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
	ents []candEntry
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
}

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
// solve forces nothing.
func (m *CandidateMemo) candidates(ctx context.Context, g *ir.Graph, lm *mesh.LogicalMesh, opts Options) ([][]Strategy, *fusion, error) {
	cm, err := opts.costModel()
	if m == nil || err != nil || len(opts.Force) > 0 || len(opts.ForceSpec) > 0 {
		return candidates(ctx, g, lm, opts)
	}
	k := candKeyOf(g, lm, cm, opts)
	m.mu.Lock()
	for i := range m.ents {
		if m.ents[i].key == k {
			e := m.ents[i]
			m.mu.Unlock()
			return e.cands, e.fu, nil
		}
	}
	m.mu.Unlock()
	cands, fu, err := candidates(ctx, g, lm, opts)
	if err != nil {
		return nil, nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := range m.ents {
		if m.ents[i].key == k { // a concurrent solve got there first: keep one copy
			return m.ents[i].cands, m.ents[i].fu, nil
		}
	}
	if len(m.ents) == candMemoSize {
		copy(m.ents, m.ents[1:])
		m.ents = m.ents[:len(m.ents)-1]
	}
	m.ents = append(m.ents, candEntry{key: k, cands: cands, fu: fu})
	return cands, fu, nil
}
