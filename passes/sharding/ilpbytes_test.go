package sharding

import (
	"bufio"
	"crypto/sha256"
	"encoding/binary"
	"flag"
	"fmt"
	"hash"
	"math"
	"os"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/ilp"
	"github.com/autopar/autopar/ir"
)

var updateILPBytes = flag.Bool("update-ilp-bytes", false, "rewrite testdata/ilp-bytes.txt (TestILPBytes)")

// ilpBytesFile holds, per case of TestILPBytes, the SHA-256 of everything the planner
// hands the solver and the result: the built problem, the holding and memory rows the
// lazy rounds would add, and the groups' members, picks and costs.
const ilpBytesFile = "testdata/ilp-bytes.txt"

// hashProblem writes p exactly (names, kinds, bounds, coefficients as bits) into h.
func hashProblem(h hash.Hash, p *ilp.Problem) {
	num := func(x float64) { binary.Write(h, binary.LittleEndian, math.Float64bits(x)) }
	terms := func(ts []ilp.Term) {
		binary.Write(h, binary.LittleEndian, int64(len(ts)))
		for _, t := range ts {
			binary.Write(h, binary.LittleEndian, int64(t.Var))
			num(t.Coef)
		}
	}
	for _, v := range p.Vars {
		fmt.Fprintf(h, "v %s %d|", v.Name, v.Kind)
		num(v.Lo)
		num(v.Hi)
	}
	for _, r := range p.Rows {
		fmt.Fprintf(h, "r %s %d|", r.Name, r.Sense)
		num(r.RHS)
		terms(r.Terms)
	}
	fmt.Fprint(h, "obj|")
	terms(p.Objective)
	num(p.ObjConstant)
}

// plannerHash is the SHA-256 of what newPlanner built for the solver and the result: the
// candidates (names included), the groups, the problem and the rows the solve adds.
func plannerHash(p *planner) string {
	h := sha256.New()
	hashProblem(h, p.prob)
	fmt.Fprintf(h, "|%d %d %d %d %d %d %d|", p.numS, p.numOneHot, p.edgeVars, p.shared, p.perEdge, p.pruned, p.cut)
	for v, cs := range p.cands {
		for _, c := range cs {
			fmt.Fprintf(h, "c %d %q %v %v %v|", v, c.Name, c.In, c.Out, c.Collectives)
			for _, x := range []float64{c.Compute, c.Comm, float64(c.Memory)} {
				binary.Write(h, binary.LittleEndian, math.Float64bits(x))
			}
		}
	}
	for gi, gr := range p.groups {
		fmt.Fprintf(h, "g %d %d %v|", gi, p.rep[gi], gr.members)
		for _, s := range gr.strats {
			fmt.Fprintf(h, "%v ", s.pick)
			binary.Write(h, binary.LittleEndian, math.Float64bits(s.obj))
			binary.Write(h, binary.LittleEndian, math.Float64bits(s.reshard))
		}
	}
	// The rows the solve adds: holding variables, and the memory rows of 200 points.
	q := &ilp.Problem{Vars: append([]ilp.Var(nil), p.prob.Vars...)}
	hs := p.addHolds(q)
	p.live = liveness(p.g, p.opts.Recompute)
	for t := 0; t < p.live.points; t += max(1, p.live.points/200) {
		q.AddRow(fmt.Sprint("mem", t), p.memoryTerms(t, hs), ilp.LE, 1)
	}
	hashProblem(h, q)
	return fmt.Sprintf("%x", h.Sum(nil))
}

// TestILPBytes: the planner builds, for four models on a 2×2 mesh (the tiny zoo models'
// whole SGD step; one GPT-1.3B layer at a micro-batch of 16, not under -short) and for a
// two-layer GPT with tied layers weighed for 4 micro-batches, exactly the problem, groups
// and memory rows recorded in testdata/ilp-bytes.txt. It guards changes that must only make
// the planner cheaper to build; a change meant to alter the ILP rewrites the file with
// -update-ilp-bytes and says why in docs/DECISIONS.md.
func TestILPBytes(t *testing.T) {
	type tc struct {
		name string
		g    func(t *testing.T) *ir.Graph
		opts func(g *ir.Graph) Options
	}
	c, lm := benchMesh(t, "p3.16xlarge", 2, 2)
	plain := func(*ir.Graph) Options { return Options{Cluster: c} }
	tiny := func(name string) func(t *testing.T) *ir.Graph {
		return func(t *testing.T) *ir.Graph { return tinyStep(t, name) }
	}
	cases := []tc{
		{"gpt-tiny", tiny("gpt-tiny"), plain},
		{"moe-tiny", tiny("moe-tiny"), plain},
		{"wresnet-tiny", tiny("wresnet-tiny"), plain},
		{"gpt-2layers-tied-mb4", func(t *testing.T) *ir.Graph { return gptStep(t, 2, 64, 4, 16, 128, 8) },
			func(g *ir.Graph) Options {
				update := make([]bool, len(g.Values))
				acc := make([]bool, len(g.Values))
				for _, u := range g.Updates {
					update[u.Value] = true
					for _, a := range g.Value(u.Value).Args {
						acc[a] = g.Value(a).Op != ir.OpParam
					}
				}
				return Options{Cluster: c, SolveLayersOnce: true, Microbatches: 4, Update: update, Accumulated: acc}
			}},
		{"gpt-1.3b-layer", func(t *testing.T) *ir.Graph {
			if testing.Short() {
				t.Skip("-short: the GPT-1.3B layer takes seconds")
			}
			return gptLayerStep(t)
		}, plain},
	}
	want := map[string]string{}
	if f, err := os.Open(ilpBytesFile); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), " "); ok {
				want[k] = v
			}
		}
		f.Close()
	}
	got := map[string]string{}
	for _, k := range cases {
		t.Run(k.name, func(t *testing.T) {
			g := k.g(t)
			p, err := newPlanner(g, lm, k.opts(g))
			require.NoError(t, err)
			got[k.name] = plannerHash(p)
			if !*updateILPBytes {
				require.Equal(t, want[k.name], got[k.name], "the planner built another ILP for %s (-update-ilp-bytes rewrites %s)", k.name, ilpBytesFile)
			}
		})
	}
	if *updateILPBytes {
		for k, v := range want {
			if _, ok := got[k]; !ok {
				got[k] = v // skipped under -short: keep
			}
		}
		keys := make([]string, 0, len(got))
		for k := range got {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var b strings.Builder
		for _, k := range keys {
			fmt.Fprintf(&b, "%s %s\n", k, got[k])
		}
		require.NoError(t, os.WriteFile(ilpBytesFile, []byte(b.String()), 0o644))
	}
}
