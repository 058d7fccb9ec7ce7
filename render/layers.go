package render

import (
	"fmt"
	"sort"
	"strings"

	"github.com/emicklei/dot"

	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/mesh"
	"github.com/autopar/autopar/units"
)

// layerKey names one node of the layer view: layer Layer as stage Stage runs it.
type layerKey struct{ Stage, Layer int }

// layerNode is what the layer view says about one layer of one stage.
type layerNode struct {
	key      layerKey
	values   int     // listed values, leaves included
	ops      int     // values with operands
	flops    float64 // per micro-batch, of the ops
	time     float64 // the ops' compute + communication, per micro-batch
	heaviest *ir.Value
	maxFLOPs float64
	strategy string
	reshards int     // collectives between two values of this node
	rsTime   float64 // their time
	// blocks are the model blocks the node's forward ops belong to, in order: their
	// names' first two parts (l0.mlp of l0.mlp.w1), as the model names them.
	blocks []string
	node   dot.Node
}

// layerEdge sums the operand uses from one layer node to another.
type layerEdge struct {
	from, to layerKey
	// bytes are per pass of the values that cross (forward, backward, update; leaves count
	// as forward), each value counted once however many consumers read it.
	bytes    [phaseU + 1]int64
	reshards int
	rsTime   float64
	kinds    []string // collective names, in order of first use
	seen     map[ir.ValueID]bool
}

// layerOf places a listed value: at its own layer, moved into the stage's range for the
// leaves and constants the plan files under the layer of a first user in another stage.
func (ix *index) layerOf(s int, layer int) layerKey {
	st := &ix.p.Stages[s]
	return layerKey{s, min(max(layer, st.FirstLayer), st.LastLayer)}
}

// drawLayers adds one node per (stage, layer) and one edge per pair of nodes that values
// cross between, labelled with the bytes that cross and the collectives they need.
func drawLayers(g *dot.Graph, clusters []*dot.Graph, ix *index, edges []edge) error {
	nodes := map[layerKey]*layerNode{}
	var order []layerKey
	for s, st := range ix.p.Stages {
		for _, v := range st.Values {
			k := ix.layerOf(s, v.Layer)
			n := nodes[k]
			if n == nil {
				n = &layerNode{key: k}
				nodes[k] = n
				order = append(order, k)
			}
			id, _ := ix.step.Lookup(v.Name)
			n.add(ix.step, id, v.Compute+v.Comm, v.Strategy)
			if ix.phase[id] == phaseF {
				n.addBlock(blockOf(v.Name))
			}
		}
	}
	lines, err := ix.layerEdges(edges, nodes)
	if err != nil {
		return err
	}
	sort.Slice(order, func(i, j int) bool {
		a, b := order[i], order[j]
		return a.Stage < b.Stage || a.Stage == b.Stage && a.Layer < b.Layer
	})
	for _, k := range order {
		n := nodes[k]
		n.node = clusters[k.Stage].Node(fmt.Sprintf("s%d:layer%d", k.Stage, k.Layer))
		n.node.Label(n.label())
		n.node.Attrs("shape", "box", "style", "filled,rounded", "fillcolor", StageColor(k.Stage))
	}
	for _, le := range lines {
		de := g.Edge(nodes[le.from].node, nodes[le.to].node)
		le.style(de)
	}
	return nil
}

func (n *layerNode) add(g *ir.Graph, id ir.ValueID, t float64, strategy string) {
	n.values++
	v := g.Value(id)
	if len(v.Args) == 0 {
		return
	}
	n.ops++
	f := g.FLOPs(id)
	n.flops += f
	n.time += t
	if n.heaviest == nil || f > n.maxFLOPs {
		n.heaviest, n.maxFLOPs, n.strategy = v, f, strategy
	}
}

// blockOf is the model block a value's name places it in: its first two dot-separated
// parts (l0.mlp of l0.mlp.w1.einsum; embed of embed).
func blockOf(name string) string {
	parts := strings.SplitN(name, ".", 3)
	return strings.Join(parts[:min(2, len(parts))], ".")
}

func (n *layerNode) addBlock(b string) {
	if !containsString(n.blocks, b) {
		n.blocks = append(n.blocks, b)
	}
}

// blockRange names the model blocks of a layer: "l0.mlp", "l0.mlp, l1.ln1",
// "l0.mlp … l1.attn" (first and last of more), or "backward only".
func (n *layerNode) blockRange() string {
	switch len(n.blocks) {
	case 0:
		return "backward only"
	case 1, 2:
		return strings.Join(n.blocks, ", ")
	}
	return n.blocks[0] + " … " + n.blocks[len(n.blocks)-1]
}

func (n *layerNode) label() string {
	var b strings.Builder
	fmt.Fprintf(&b, "layer %d: %s\n%s (%s), %s\n%s per micro-batch", n.key.Layer, n.blockRange(), plural(n.ops, "op"),
		plural(n.values, "value"), units.FLOPs(n.flops), units.Seconds(n.time))
	if n.heaviest != nil {
		fmt.Fprintf(&b, "\nheaviest: %s %s", n.heaviest.Name, n.strategy)
	}
	if n.reshards > 0 {
		fmt.Fprintf(&b, "\nresharding inside: %s, %s", plural(n.reshards, "collective"), units.Seconds(n.rsTime))
	}
	return b.String()
}

// layerEdges folds the operand edges into edges between layer nodes, in order of first
// appearance (the plan's order), and counts the collectives inside each node.
func (ix *index) layerEdges(edges []edge, nodes map[layerKey]*layerNode) ([]*layerEdge, error) {
	memo := map[string]reshard{}
	byPair := map[[2]layerKey]*layerEdge{}
	var out []*layerEdge
	for _, e := range edges {
		r, err := ix.reshardOf(e, memo)
		if err != nil {
			return nil, err
		}
		from := ix.layerOf(e.FromStage, ix.value(e.FromStage, e.From).Layer)
		to := ix.layerOf(e.ToStage, ix.value(e.ToStage, e.To).Layer)
		if from == to {
			nodes[from].reshards += collectives(r)
			nodes[from].rsTime += r.Time
			continue
		}
		le := byPair[[2]layerKey{from, to}]
		if le == nil {
			le = &layerEdge{from: from, to: to, seen: map[ir.ValueID]bool{}}
			byPair[[2]layerKey{from, to}] = le
			out = append(out, le)
		}
		le.add(e.From, r, ix.phase[e.From])
	}
	return out, nil
}

// collectives counts the steps of r that communicate (a slice is free and local).
func collectives(r reshard) int {
	n := 0
	for _, st := range r.Steps {
		if st.Kind != mesh.Slice {
			n++
		}
	}
	return n
}

func (le *layerEdge) add(v ir.ValueID, r reshard, ph phase) {
	if ph == phaseNone {
		ph = phaseF
	}
	if !le.seen[v] {
		le.seen[v] = true
		le.bytes[ph] += r.Bytes
	}
	le.reshards += collectives(r)
	le.rsTime += r.Time
	for _, st := range r.Steps {
		name := collectiveName(st.Kind)
		if st.Kind != mesh.Slice && !containsString(le.kinds, name) {
			le.kinds = append(le.kinds, name)
		}
	}
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// style labels a layer edge with what crosses it: forward values (activations, and the
// weights they read) and gradients per micro-batch, the update's values per step; an edge
// that carries no forward value is dashed.
func (le *layerEdge) style(de dot.Edge) {
	var parts []string
	if b := le.bytes[phaseF]; b > 0 || le.bytes[phaseB]+le.bytes[phaseU] == 0 {
		parts = append(parts, "forward "+units.Bytes(b))
	}
	if b := le.bytes[phaseB]; b > 0 {
		parts = append(parts, "gradients "+units.Bytes(b))
	}
	if b := le.bytes[phaseU]; b > 0 {
		parts = append(parts, "update "+units.Bytes(b)+" per step")
	}
	label := strings.Join(parts, "\n")
	if le.bytes[phaseF] == 0 {
		de.Attr("style", "dashed")
	}
	switch {
	case le.from.Stage != le.to.Stage:
		de.Label("send/recv " + label)
		de.Attrs("color", colorCross, "fontcolor", colorCross, "penwidth", "2")
	case le.reshards > 0:
		de.Label(fmt.Sprintf("%s\n%d× %s, %s", label, le.reshards, strings.Join(le.kinds, ", "), units.Seconds(le.rsTime)))
		de.Attrs("color", colorReshard, "fontcolor", colorReshard, "penwidth", "1.5")
	default:
		de.Label(label)
		de.Attr("color", colorPlain)
	}
}

// plural writes a count with its noun: 1 op, 3 ops.
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
