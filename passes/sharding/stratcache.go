package sharding

import (
	"context"
	"encoding/binary"
	"math"
	"sync"

	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/mesh"
)

// strategyCache keeps strategiesOf's and leastMemory's answers by what they read of a value,
// so that values alike in that are enumerated once: a model's repeated layers, the same
// layers in the layer graphs and the range graphs of one micro-batch count, and the
// weights' and optimizer's ops, alike at every count. On MoE-10B/16 the stage graphs'
// 78,600 values had 6,500 signatures; the enumeration was a seventh of the search's CPU.
//
// The key is exact. strategiesOf reads of its value only the op, the result's and the
// operands' types, ruleOf's rule (the dims signature with its fixed labels, which is where
// the attributes enter), the FLOPs and the fusion's flags for the value (writes, launches,
// reads and readScale of each operand); of the mesh its Shape, Alpha, Beta and PriceKey
// (LocalShape, AxisSize, Cost, HostDevices read nothing else); and the cost model and
// convCut. leastMemory reads the same less the FLOPs' use and the fusion. Equal keys
// therefore give equal strategies, in the same order, with the same names, and the
// strategies are only read once made (as CandidateMemo already shares them between
// solves), so values may share one slice. TestStrategyCacheMatches holds the cached
// candidates to the uncached ones on the zoo.
//
// It holds at most strategyCacheSize signatures and starts over past that, so its memory
// stays bounded; the zero value is ready.
type strategyCache struct {
	mu     sync.Mutex
	tables map[stratMeshKey]*stratTable
	size   int
}

// stratMeshKey is what strategiesOf reads beside the value: the mesh, the cost model and
// the convolution cut.
type stratMeshKey struct {
	shape       [2]int
	alpha, beta [2]float64
	price       mesh.PriceKey
	cm          costModel
	convCut     bool
}

type stratTable struct {
	strats map[string][]Strategy // by the value's signature with its fusion flags
	least  map[string]int64      // by the signature alone
}

const strategyCacheSize = 1 << 15

func stratMeshKeyOf(lm *mesh.LogicalMesh, cm costModel, convCut bool) stratMeshKey {
	return stratMeshKey{shape: lm.Shape, alpha: lm.Alpha, beta: lm.Beta, price: lm.PriceKey(), cm: cm, convCut: convCut}
}

// table returns the cache's table for k, made if missing. A nil cache has none.
func (c *strategyCache) table(k stratMeshKey) *stratTable {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.tables[k]
	if t == nil {
		if c.tables == nil {
			c.tables = map[stratMeshKey]*stratTable{}
		}
		t = &stratTable{strats: map[string][]Strategy{}, least: map[string]int64{}}
		c.tables[k] = t
	}
	return t
}

func (c *strategyCache) strategies(t *stratTable, sig []byte) ([]Strategy, bool) {
	if t == nil {
		return nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := t.strats[string(sig)]
	return s, ok
}

func (c *strategyCache) leastOf(t *stratTable, sig []byte) (int64, bool) {
	if t == nil {
		return 0, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	m, ok := t.least[string(sig)]
	return m, ok
}

// put records a value's strategies under sig (with its fusion flags) and their least
// Memory under base (sig's prefix without them): leastMemory's answer, which is the least
// of strategiesOf's (TestLeastMemoryMatchesCandidates).
func (c *strategyCache) put(t *stratTable, sig []byte, base int, ss []Strategy) {
	if t == nil {
		return
	}
	least := ss[0].Memory
	for _, s := range ss[1:] {
		least = min(least, s.Memory)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.room()
	if _, ok := t.strats[string(sig)]; !ok {
		t.strats[string(sig)] = ss
		c.size++
	}
	if _, ok := t.least[string(sig[:base])]; !ok {
		t.least[string(sig[:base])] = least
		c.size++
	}
}

func (c *strategyCache) putLeast(t *stratTable, sig []byte, least int64) {
	if t == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.room()
	if _, ok := t.least[string(sig)]; !ok {
		t.least[string(sig)] = least
		c.size++
	}
}

// room empties the tables once they hold strategyCacheSize entries (under c.mu).
func (c *strategyCache) room() {
	if c.size < strategyCacheSize {
		return
	}
	for _, t := range c.tables {
		clear(t.strats)
		clear(t.least)
	}
	c.size = 0
}

// signature appends to buf what strategiesOf and leastMemory read of enumerator e's value
// (op, types, rule, FLOPs); base is its length. The fusion's flags come after, from
// fusionSignature.
func (e *enumerator) signature(buf []byte) []byte {
	u := func(x int) { buf = binary.AppendVarint(buf, int64(x)) }
	b := func(x bool) {
		if x {
			buf = append(buf, 1)
		} else {
			buf = append(buf, 0)
		}
	}
	typ := func(t ir.Type) {
		u(int(t.DType))
		u(len(t.Shape))
		for _, n := range t.Shape {
			u(n)
		}
	}
	ints := func(xs []int) {
		u(len(xs))
		for _, x := range xs {
			u(x)
		}
	}
	u(int(e.v.Op))
	typ(e.v.Type)
	u(len(e.args))
	for _, t := range e.args {
		typ(t)
	}
	d := e.r.dims
	ints(d.Sizes)
	u(len(d.Fixed))
	for _, f := range d.Fixed {
		b(f)
	}
	ints(d.Result)
	u(len(d.Operands))
	for _, op := range d.Operands {
		ints(op)
	}
	b(e.r.partialOK)
	b(e.r.scatterOK)
	b(e.r.heavy)
	u(len(e.r.reduce))
	buf = append(buf, e.r.reduce...)
	buf = binary.LittleEndian.AppendUint64(buf, math.Float64bits(e.flops))
	return buf
}

// fusionSignature appends the fusion's flags for e's value.
func (e *enumerator) fusionSignature(buf []byte) []byte {
	b := func(x bool) {
		if x {
			buf = append(buf, 1)
		} else {
			buf = append(buf, 0)
		}
	}
	b(e.fu.writes(e.id))
	b(e.fu.launches(e.id))
	for i := range e.args {
		b(e.fu.reads(e.id, i))
		buf = binary.LittleEndian.AppendUint64(buf, math.Float64bits(e.fu.readScale(e.id, i)))
	}
	return buf
}

// candidatesCached is candidates, each value's strategies taken from c where a value of
// the same signature was enumerated before (a nil c: from one made for this call).
func candidatesCached(ctx context.Context, g *ir.Graph, lm *mesh.LogicalMesh, opts Options, c *strategyCache) ([][]Strategy, *fusion, error) {
	if err := ir.Verify(g); err != nil {
		return nil, nil, err
	}
	cm, err := opts.costModel()
	if err != nil {
		return nil, nil, err
	}
	if c == nil {
		c = &strategyCache{}
	}
	convCut := !opts.FullConvs
	fu := fusionOf(g, opts, cm)
	t := c.table(stratMeshKeyOf(lm, cm, convCut))
	out := make([][]Strategy, len(g.Values))
	var sig []byte
	for id := range g.Values {
		if id%16 == 0 && ctx.Err() != nil {
			return nil, nil, ctx.Err()
		}
		e := newEnumerator(g, lm, cm, fu, ir.ValueID(id), convCut)
		sig = e.signature(sig[:0])
		base := len(sig)
		sig = e.fusionSignature(sig)
		if ss, ok := c.strategies(t, sig); ok {
			out[id] = ss
			continue
		}
		out[id] = e.strategies()
		c.put(t, sig, base, out[id])
	}
	return out, fu, nil
}

// leastMemoryCached is leastMemory, taken from c where a value of the same signature was
// seen before (a nil c computes it).
func leastMemoryCached(g *ir.Graph, lm *mesh.LogicalMesh, cm costModel, id ir.ValueID, convCut bool, c *strategyCache, t *stratTable, buf []byte) (int64, []byte) {
	e := newEnumerator(g, lm, cm, nil, id, convCut)
	buf = e.signature(buf[:0])
	if m, ok := c.leastOf(t, buf); ok {
		return m, buf
	}
	m := e.leastMemory()
	c.putLeast(t, buf, m)
	return m, buf
}
