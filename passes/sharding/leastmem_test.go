package sharding

import (
	"context"
	"fmt"
	"testing"

	"github.com/autopar/autopar/frontend"
	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/passes"
	"github.com/stretchr/testify/require"
)

// TestLeastMemoryMatchesCandidates: PeakFloors' per-value least memory without the
// candidates (leastMemory) equals the least Memory of the candidates strategiesOf builds,
// value by value, on the tiny models and MoE-1.3B's step (real sizes: odd divisors), on
// 1-D, 2-D, single-device and non-power-of-two meshes, under both cost models and (Wide-
// ResNet) with and without the convolution cut; and PeakFloors' values from a memo's entry
// equal those without it.
func TestLeastMemoryMatchesCandidates(t *testing.T) {
	graphs := map[string]*ir.Graph{}
	for _, name := range []string{"mlp-tiny", "gpt-tiny", "moe-tiny", "wresnet-tiny", "moe-1.3b"} {
		g, err := frontend.ParseFile("../../testdata/models/" + name + ".ir")
		require.NoError(t, err)
		if name == "moe-1.3b" {
			g, err = passes.Rebatch(g, 16)
			require.NoError(t, err)
		}
		g, err = passes.TrainingStep(g, passes.Optimizer{Kind: "adam", LR: 0.01})
		require.NoError(t, err)
		graphs[name] = g
	}
	checked, differ := 0, 0
	for _, name := range []string{"mlp-tiny", "gpt-tiny", "moe-tiny", "wresnet-tiny", "moe-1.3b"} {
		g := graphs[name]

		for _, shape := range [][2]int{{1, 1}, {1, 4}, {4, 1}, {2, 2}, {2, 4}, {2, 3}, {2, 8}} {
			if name == "moe-1.3b" && shape != [2]int{2, 8} {
				continue // the real model on one mesh only: the test stays fast
			}
			c, lm := benchMesh(t, "p3.16xlarge:2", shape[0], shape[1])
			for _, alpa := range []bool{false, true} {
				for _, full := range []bool{false, true} {
					if full && name != "wresnet-tiny" {
						continue // the cut is of convolutions
					}
					opts := Options{Cluster: c, AlpaCompute: alpa, FullConvs: full}
					at := fmt.Sprintf("%s on %dx%d, alpa %v, full convs %v", name, shape[0], shape[1], alpa, full)
					cands, _, err := candidates(context.Background(), g, lm, opts)
					require.NoError(t, err, at)
					cm, err := opts.costModel()
					require.NoError(t, err)
					for id, cs := range cands {
						least := cs[0].Memory
						for _, s := range cs {
							least = min(least, s.Memory)
						}
						got := leastMemory(g, lm, cm, ir.ValueID(id), !full)
						require.Equal(t, least, got, "%s: value %s", at, g.Value(ir.ValueID(id)).Name)
						checked++
						for _, s := range cs {
							if s.Memory != least {
								differ++
								break
							}
						}
					}
					if !alpa {
						continue
					}
					memo := &CandidateMemo{}
					opts.Candidates = memo
					fresh, err := leastMemories(context.Background(), g, lm, opts)
					require.NoError(t, err)
					_, _, _, err = memo.candidates(context.Background(), g, lm, opts)
					require.NoError(t, err)
					kept, err := leastMemories(context.Background(), g, lm, opts)
					require.NoError(t, err)
					require.Equal(t, kept, fresh, "%s: from the memo and without it", at)
				}
			}
		}
	}
	t.Logf("%d values checked, %d with candidates of different memory", checked, differ)
}
