package sharding

import (
	"context"
	"fmt"
	"testing"

	"github.com/autopar/autopar/frontend"
	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/mesh"
	"github.com/autopar/autopar/passes"
	"github.com/stretchr/testify/require"
)

// TestStrategyCacheMatches: candidates and least memories through one strategyCache shared
// by every graph, mesh and cost model below equal strategiesOf's and leastMemory's without
// it, value by value (the same strategies in the same order, names and prices included):
// the tiny models, MoE-1.3B's step at two micro-batch sizes (the same layers at other
// shapes), on meshes of one and two hosts, the same shape placed on another host (the
// cache's hits across placements), a hand-priced mesh (the flat model), both cost models,
// with and without the convolution cut, with and without fusion (NoMerge). It also checks
// that the cache answered most values. MoE-1.3B only outside -short.
func TestStrategyCacheMatches(t *testing.T) {
	type step struct {
		name string
		g    *ir.Graph
	}
	var steps []step
	for _, name := range []string{"mlp-tiny", "gpt-tiny", "moe-tiny", "wresnet-tiny", "moe-1.3b"} {
		base, err := frontend.ParseFile("../../testdata/models/" + name + ".ir")
		require.NoError(t, err)
		batches := []int{0}
		if name == "moe-1.3b" {
			batches = []int{16, 8}
		}
		for _, b := range batches {
			g := base
			if b > 0 {
				g, err = passes.Rebatch(g, b)
				require.NoError(t, err)
			}
			g, err = passes.TrainingStep(g, passes.Optimizer{Kind: "adam", LR: 0.01})
			require.NoError(t, err)
			steps = append(steps, step{fmt.Sprintf("%s/%d", name, b), g})
		}
	}
	c2, err := mesh.ParseCluster("p3.16xlarge:2")
	require.NoError(t, err)
	c4, err := mesh.ParseCluster("p3.16xlarge:4")
	require.NoError(t, err)
	type meshAt struct {
		name string
		c    *mesh.Cluster
		lm   *mesh.LogicalMesh
	}
	at := func(c *mesh.Cluster, hosts, devices int, origin mesh.DeviceID, n0, n1 int) *mesh.LogicalMesh {
		lm, err := mesh.NewLogicalMeshAt(c, mesh.Submesh{Hosts: hosts, Devices: devices}, origin, n0, n1)
		require.NoError(t, err)
		return lm
	}
	meshes := []meshAt{
		{"2x4 host 0", c2, at(c2, 1, 8, 0, 2, 4)},
		{"2x4 host 1", c2, at(c2, 1, 8, 8, 2, 4)},
		{"4x2", c2, at(c2, 1, 8, 0, 4, 2)},
		{"1x4", c2, at(c2, 1, 4, 0, 1, 4)},
		{"2x8 two hosts", c2, at(c2, 2, 8, 0, 2, 8)},
		{"2x8 of four hosts", c4, at(c4, 2, 8, 16, 2, 8)},
		{"2x3 flat", c2, at(c2, 1, 8, 0, 2, 4).WithAxisCost(0, 1e-5, 1e-9)},
	}
	meshes[len(meshes)-1].lm.Shape = [2]int{2, 3}
	meshes[len(meshes)-1].lm.Devices = meshes[len(meshes)-1].lm.Devices[:6]
	cache := &strategyCache{}
	hits, values := 0, 0
	for _, s := range steps {
		for _, m := range meshes {
			real := s.name == "moe-1.3b/16" || s.name == "moe-1.3b/8"
			if real && (testing.Short() || m.name != "2x8 two hosts" && m.name != "2x8 of four hosts") {
				continue // the real model on the two-host meshes only: the test stays fast
			}
			for _, o := range []Options{
				{Cluster: m.c},
				{Cluster: m.c, AlpaCompute: true},
				{Cluster: m.c, FullConvs: true},
				{Cluster: m.c, NoMerge: true},
				{DeviceFLOPS: 1},
			} {
				rare := o.NoMerge || o.DeviceFLOPS > 0 // on two meshes: the test stays fast
				if o.FullConvs && s.name != "wresnet-tiny/0" || rare && m.name != "2x4 host 0" && m.name != "2x3 flat" ||
					real && (rare || o.AlpaCompute && s.name == "moe-1.3b/8") {
					continue
				}
				where := fmt.Sprintf("%s on %s, %+v", s.name, m.name, o)
				before := cache.strategiesHeld()
				got, fu, err := candidatesCached(context.Background(), s.g, m.lm, o, cache)
				require.NoError(t, err, where)
				cm, err := o.costModel()
				require.NoError(t, err)
				for id := range s.g.Values {
					want := strategiesOf(s.g, m.lm, cm, fu, ir.ValueID(id), !o.FullConvs)
					require.Equal(t, want, got[id], "%s: value %s", where, s.g.Value(ir.ValueID(id)).Name)
				}
				values += len(s.g.Values)
				hits += len(s.g.Values) - (cache.strategiesHeld() - before)
				t2 := cache.table(stratMeshKeyOf(m.lm, cm, !o.FullConvs))
				var buf []byte
				for id := range s.g.Values {
					var least int64
					least, buf = leastMemoryCached(s.g, m.lm, cm, ir.ValueID(id), !o.FullConvs, cache, t2, buf)
					require.Equal(t, leastMemory(s.g, m.lm, cm, ir.ValueID(id), !o.FullConvs), least,
						"%s: least memory of %s", where, s.g.Value(ir.ValueID(id)).Name)
				}
			}
		}
	}
	require.Greater(t, hits, values/2, "the cache answered under half of the values")
	t.Logf("%d values, %d answered by the cache", values, hits)
}

// TestStrategyCacheKeys: values that differ only in what strategiesOf reads get different
// signatures (a mutation that drops a part of the key makes two of these collide), and
// meshes that price alike share a table while ones that do not get their own.
func TestStrategyCacheKeys(t *testing.T) {
	g := tinyStep(t, "gpt-tiny")
	c, lm := benchMesh(t, "p3.16xlarge:2", 2, 4)
	cm := costModel{cluster: c}
	fu := fusionOf(g, Options{Cluster: c}, cm)
	seen := map[string][]Strategy{}
	for id := range g.Values {
		e := newEnumerator(g, lm, cm, fu, ir.ValueID(id), true)
		sig := string(e.fusionSignature(e.signature(nil)))
		ss := e.strategies()
		if had, ok := seen[sig]; ok {
			require.Equal(t, had, ss, "value %s shares a signature with another of other strategies", g.Value(ir.ValueID(id)).Name)
		}
		seen[sig] = ss
	}
	require.Less(t, len(seen), len(g.Values), "no two values of the tiny GPT alike")

	other, err := mesh.NewLogicalMeshAt(c, mesh.Submesh{Hosts: 1, Devices: 8}, 8, 2, 4)
	require.NoError(t, err)
	require.Equal(t, stratMeshKeyOf(lm, cm, true), stratMeshKeyOf(other, cm, true), "the same shape on the other host")
	two, err := mesh.NewLogicalMeshAt(c, mesh.Submesh{Hosts: 2, Devices: 4}, 0, 2, 4)
	require.NoError(t, err)
	require.NotEqual(t, stratMeshKeyOf(lm, cm, true), stratMeshKeyOf(two, cm, true), "one host against two")
	require.NotEqual(t, stratMeshKeyOf(lm, cm, true), stratMeshKeyOf(lm, cm, false), "the convolution cut")
	require.NotEqual(t, stratMeshKeyOf(lm, cm, true), stratMeshKeyOf(lm, costModel{cluster: c, alpa: true}, true), "the cost model")
}

// strategiesHeld is how many signatures' strategies the cache holds.
func (c *strategyCache) strategiesHeld() int {
	n := 0
	for _, t := range c.tables {
		n += len(t.strats)
	}
	return n
}
