package onnx

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/autopar/autopar/frontend/onnx/onnxpb"
	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/runtime/kernels"
)

// Options steer an import.
type Options struct {
	// Name is the graph's name; empty: the file's base name without extension.
	Name string
	// Batch is the size of a symbolic dim 0 of the graph inputs (the batch, in
	// torch.onnx.export's dynamic_axes); 0: none given, and a symbolic dim is an error.
	Batch int
	// Loss, when "cross-entropy", adds a training loss to an inference graph: the mean
	// sparse cross-entropy of the first output (logits [..., C]) against a new integer input
	// named Labels. Empty: the graph's first output must already be a float scalar loss.
	Loss   string
	Labels string
}

// Model is an imported ONNX model.
type Model struct {
	// Graph is the forward graph, its first output the loss; it passed ir.Verify.
	Graph *ir.Graph
	// Weights holds the value of every param of Graph: the ONNX initializers.
	Weights map[string]*kernels.Tensor
	// Inputs and Outputs map the ONNX graph's inputs and outputs to the Graph values that
	// hold them.
	Inputs, Outputs map[string]string
}

// ImportFile reads and imports the ONNX model at path.
func ImportFile(path string, opts Options) (*Model, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Import(path, data, opts)
}

// Import converts the ONNX model in data (read from path, which names it in errors) into an
// ir.Graph and its weights. Every error names the file and, where one is at fault, the
// node (its name and op type) or the input; ops the importer does not cover are all listed
// in one error.
func Import(path string, data []byte, opts Options) (*Model, error) {
	m, opset, err := decode(path, data)
	if err != nil {
		return nil, err
	}
	name := opts.Name
	if name == "" {
		name = sanitize(strings.TrimSuffix(filepath.Base(path), filepath.Ext(path)))
	}
	im := newImporter(path, ir.NewGraph(name), opset)
	gp := m.GetGraph()
	live := liveNodes(gp)
	nodes := fuseGelu(gp.GetNode(), live, im.constOf(gp))
	if err := checkSupported(path, nodes, live); err != nil {
		return nil, err
	}
	if err := im.initializers(gp); err != nil {
		return nil, err
	}
	if err := im.inputs(gp, opts.Batch); err != nil {
		return nil, err
	}
	for i, n := range nodes {
		if !live[i] {
			continue
		}
		if err := im.node(n); err != nil {
			return nil, err
		}
	}
	outs, err := im.outputs(gp, opts)
	if err != nil {
		return nil, err
	}
	im.setLimits()
	if err := ir.Verify(im.g); err != nil {
		return nil, fmt.Errorf("%s: the imported graph does not verify (an importer bug): %w", path, err)
	}
	ins := map[string]string{}
	for _, in := range gp.GetInput() {
		if v, ok := im.vals[in.GetName()]; ok && v.id != ir.NoValue && im.g.Value(v.id).Op == ir.OpInput {
			ins[in.GetName()] = im.g.Value(v.id).Name
		}
	}
	return &Model{Graph: im.g, Weights: im.weights, Inputs: ins, Outputs: outs}, nil
}

// liveNodes marks the nodes the graph outputs depend on; the rest (batch norm's running
// statistics, unused second outputs) are not imported.
func liveNodes(gp *onnxpb.GraphProto) []bool {
	nodes := gp.GetNode()
	producer := map[string]int{}
	for i, n := range nodes {
		for _, o := range n.GetOutput() {
			producer[o] = i
		}
	}
	live := make([]bool, len(nodes))
	var stack []string
	for _, o := range gp.GetOutput() {
		stack = append(stack, o.GetName())
	}
	for len(stack) > 0 {
		name := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		i, ok := producer[name]
		if !ok || live[i] {
			continue
		}
		live[i] = true
		stack = append(stack, nodes[i].GetInput()...)
	}
	return live
}

// checkSupported lists, in one error, every live node whose op the importer does not cover.
func checkSupported(path string, nodes []*onnxpb.NodeProto, live []bool) error {
	var bad []string
	kinds := map[string]bool{}
	for i, n := range nodes {
		if !live[i] {
			continue
		}
		d := n.GetDomain()
		_, ok := lowerings[n.GetOpType()]
		if ok && (d == "" || d == "ai.onnx") {
			continue
		}
		op := n.GetOpType()
		if d != "" && d != "ai.onnx" {
			op = d + "." + op
		}
		why := ""
		if n.GetOpType() == "Erf" {
			why = ", outside GELU's expansion x·0.5·(1+erf(x/√2))"
		}
		bad = append(bad, fmt.Sprintf("\tnode %q: %s%s", nodeName(n, i), op, why))
		kinds[op] = true
	}
	if len(bad) == 0 {
		return nil
	}
	ks := make([]string, 0, len(kinds))
	for k := range kinds {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return fmt.Errorf("%s: %d node%s use ops autopar does not import (%s):\n%s", path, len(bad), plural(len(bad)),
		strings.Join(ks, ", "), strings.Join(bad, "\n"))
}

func nodeName(n *onnxpb.NodeProto, i int) string {
	if n.GetName() != "" {
		return n.GetName()
	}
	return fmt.Sprintf("#%d", i)
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// initializers records every initializer: float ones become params when first used at
// run time, integer and bool ones are constants known at import time.
func (im *importer) initializers(gp *onnxpb.GraphProto) error {
	for _, tp := range gp.GetInitializer() {
		t, err := tensorOf(tp)
		if err != nil {
			return fmt.Errorf("%s: initializer: %v", im.path, err)
		}
		im.vals[tp.GetName()] = &val{id: ir.NoValue, c: t, param: t.Type.DType.IsFloat(), onnx: tp.GetName()}
	}
	if len(gp.GetSparseInitializer()) > 0 {
		return fmt.Errorf("%s: sparse initializers are not supported", im.path)
	}
	return nil
}

// inputs declares the graph inputs that are not initializers, with dim 0 as the batch.
func (im *importer) inputs(gp *onnxpb.GraphProto, batch int) error {
	for _, in := range gp.GetInput() {
		if _, isInit := im.vals[in.GetName()]; isInit {
			continue
		}
		tt := in.GetType().GetTensorType()
		if tt == nil {
			return fmt.Errorf("%s: input %q is not a tensor", im.path, in.GetName())
		}
		dt, ok := dtypeOf(tt.GetElemType())
		if !ok || (tt.GetElemType() != int32(onnxpb.TensorProto_INT64) && !dt.IsFloat() && dt != ir.I32 && dt != ir.Bool) {
			return fmt.Errorf("%s: input %q has element type %s, which autopar does not take as data", im.path, in.GetName(), dtypeName(tt.GetElemType()))
		}
		if tt.GetShape() == nil {
			return fmt.Errorf("%s: input %q has no shape: export with static shapes (or a symbolic batch and --batch)", im.path, in.GetName())
		}
		shape := make(ir.Shape, len(tt.GetShape().GetDim()))
		for i, d := range tt.GetShape().GetDim() {
			switch v := d.GetDimValue(); {
			case v > 0 && v <= maxElements:
				shape[i] = int(v)
			case i == 0 && batch > 0:
				shape[i] = batch
			case i == 0:
				return fmt.Errorf("%s: input %q: dim 0 is symbolic (%q); give the batch size with --batch N", im.path, in.GetName(), d.GetDimParam())
			default:
				return fmt.Errorf("%s: input %q: dim %d is symbolic (%q): autopar compiles static shapes; export with a fixed size for it (only the batch, dim 0, may be symbolic, with --batch)",
					im.path, in.GetName(), i, d.GetDimParam())
			}
		}
		if shape.NumElements() > maxElements {
			return fmt.Errorf("%s: input %q of shape %v is too large", im.path, in.GetName(), shape)
		}
		b := 0
		if len(shape) == 0 {
			b = -1
		}
		id, err := im.g.Declare(ir.OpInput, im.fresh(in.GetName()), ir.Type{DType: dt, Shape: shape}, b, im.pos())
		if err != nil {
			return fmt.Errorf("%s: input %q: %v", im.path, in.GetName(), err)
		}
		im.vals[in.GetName()] = &val{id: id, onnx: in.GetName()}
	}
	return nil
}

// outputs makes the loss the graph's one output: the ONNX graph's first output if it is a
// float scalar, else the loss Options asks for.
func (im *importer) outputs(gp *onnxpb.GraphProto, opts Options) (map[string]string, error) {
	outs := map[string]string{}
	var first ir.ValueID = ir.NoValue
	for i, o := range gp.GetOutput() {
		v, ok := im.vals[o.GetName()]
		if !ok {
			return nil, fmt.Errorf("%s: graph output %q is produced by no node", im.path, o.GetName())
		}
		id, err := im.rt(v)
		if err != nil {
			return nil, fmt.Errorf("%s: graph output %q: %v", im.path, o.GetName(), err)
		}
		outs[o.GetName()] = im.g.Value(id).Name
		if i == 0 {
			first = id
		}
	}
	if first == ir.NoValue {
		return nil, fmt.Errorf("%s: the graph has no outputs", im.path)
	}
	ft := im.g.Value(first).Type
	isLoss := ft.DType.IsFloat() && ft.Shape.Rank() == 0
	switch {
	case opts.Loss == "" && isLoss:
		im.g.AddOutput(first, im.pos())
	case opts.Loss == "":
		return nil, fmt.Errorf("%s: the first output %q is %s, not a scalar loss: the graph is inference-only; add a loss with --loss cross-entropy --labels NAME",
			im.path, gp.GetOutput()[0].GetName(), ft)
	case opts.Loss != "cross-entropy":
		return nil, fmt.Errorf("--loss %q is not known: want cross-entropy", opts.Loss)
	case isLoss:
		return nil, fmt.Errorf("%s: the first output %q is already a scalar loss; drop --loss", im.path, gp.GetOutput()[0].GetName())
	default:
		loss, err := im.crossEntropyLoss(first, opts.Labels)
		if err != nil {
			return nil, fmt.Errorf("%s: --loss cross-entropy: %v", im.path, err)
		}
		im.g.AddOutput(loss, im.pos())
	}
	return outs, nil
}

// crossEntropyLoss appends mean(sparse_cross_entropy(logits, labels)) over a new labels input.
func (im *importer) crossEntropyLoss(logits ir.ValueID, labels string) (ir.ValueID, error) {
	if labels == "" {
		return ir.NoValue, fmt.Errorf("--labels NAME is required: the name of the labels input to add")
	}
	lt := im.g.Value(logits).Type
	if !lt.DType.IsFloat() || lt.Shape.Rank() < 1 {
		return ir.NoValue, fmt.Errorf("the first output %s is %s: want float logits [..., classes]", im.g.Value(logits).Name, lt)
	}
	if _, taken := im.g.Lookup(labels); taken || !ir.ValidName(labels) {
		return ir.NoValue, fmt.Errorf("--labels %q: want a valid name not already in the graph", labels)
	}
	ls := lt.Shape[:lt.Shape.Rank()-1].Clone()
	b := 0
	if len(ls) == 0 {
		b = -1
	}
	y, err := im.g.Declare(ir.OpInput, labels, ir.Type{DType: ir.I64, Shape: ls}, b, im.pos())
	if err != nil {
		return ir.NoValue, err
	}
	im.limit(y, lt.Shape[lt.Shape.Rank()-1])
	ce, err := im.g.Append(ir.OpSparseCrossEntropy, im.g.FreshName("loss.ce"), []ir.ValueID{logits, y}, nil, im.pos())
	if err != nil || len(ls) == 0 {
		return ce, err
	}
	return im.g.Append(ir.OpReduceMean, im.g.FreshName("loss"), []ir.ValueID{ce}, ir.Attrs{}.With("axes", allAxes(len(ls))), im.pos())
}

func allAxes(rank int) []int {
	axes := make([]int, rank)
	for i := range axes {
		axes[i] = i
	}
	return axes
}

// limit records that integer input id indexes something of size n (an embedding's rows,
// the classes of a loss), so generated data stays in range: the smallest bound seen wins.
func (im *importer) limit(id ir.ValueID, n int) {
	if im.g.Value(id).Op != ir.OpInput {
		return
	}
	if old, ok := im.limits[id]; !ok || n < old {
		im.limits[id] = n
	}
}

func (im *importer) setLimits() {
	ids := make([]ir.ValueID, 0, len(im.limits))
	for id := range im.limits {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		v := im.g.Value(id)
		if v.Type.DType.IsInt() {
			v.Attrs = v.Attrs.With("limit", im.limits[id])
		}
	}
}
