package onnx

import (
	"math"

	"google.golang.org/protobuf/proto"

	"github.com/autopar/autopar/frontend/onnx/onnxpb"
	"github.com/autopar/autopar/runtime/kernels"
)

// fuseGelu finds GELU's expansion as opsets before 20 export it,
//
//	y = (x · (erf(x / √2) + 1)) · 0.5     or     y = (x · 0.5) · (erf(x / √2) + 1)
//
// (the division may be a multiplication by 1/√2), and replaces it with one Gelu node: the
// IR has gelu, in exactly this erf form, but no erf. The nodes it absorbs are marked dead in
// live; the rest of the graph is untouched. An Erf outside the pattern stays, and is
// reported as unsupported.
func fuseGelu(nodes []*onnxpb.NodeProto, live []bool, known func(string) *kernels.Tensor) []*onnxpb.NodeProto {
	out := append([]*onnxpb.NodeProto(nil), nodes...)
	users := map[string][]int{}
	producer := map[string]int{}
	for i, n := range nodes {
		if !live[i] {
			continue
		}
		for _, in := range n.GetInput() {
			users[in] = append(users[in], i)
		}
		for _, o := range n.GetOutput() {
			producer[o] = i
		}
	}
	// only returns the one live user of name, the node index, or -1.
	only := func(name string) int {
		if u := users[name]; len(u) == 1 {
			return u[0]
		}
		return -1
	}
	is := func(name string, want float64) bool {
		t := known(name)
		if t == nil || t.Len() != 1 {
			return false
		}
		return math.Abs(t.At(0)-want) <= 1e-6*math.Abs(want)
	}
	// other returns the input of a two-input node that is not name.
	other := func(n *onnxpb.NodeProto, name string) (string, bool) {
		in := n.GetInput()
		if len(in) != 2 {
			return "", false
		}
		switch name {
		case in[0]:
			return in[1], true
		case in[1]:
			return in[0], true
		}
		return "", false
	}
	for i, e := range nodes {
		if !live[i] || e.GetOpType() != "Erf" || len(e.GetInput()) != 1 {
			continue
		}
		di, ok := producer[e.GetInput()[0]]
		if !ok {
			continue
		}
		d := nodes[di]
		var x string
		switch {
		case d.GetOpType() == "Div" && len(d.GetInput()) == 2 && is(d.GetInput()[1], math.Sqrt2):
			x = d.GetInput()[0]
		case d.GetOpType() == "Mul" && len(d.GetInput()) == 2 && is(d.GetInput()[1], 1/math.Sqrt2):
			x = d.GetInput()[0]
		case d.GetOpType() == "Mul" && len(d.GetInput()) == 2 && is(d.GetInput()[0], 1/math.Sqrt2):
			x = d.GetInput()[1]
		default:
			continue
		}
		ai := only(e.GetOutput()[0])
		if ai < 0 || nodes[ai].GetOpType() != "Add" {
			continue
		}
		if c, ok := other(nodes[ai], e.GetOutput()[0]); !ok || !is(c, 1) {
			continue
		}
		mi := only(nodes[ai].GetOutput()[0])
		if mi < 0 || nodes[mi].GetOpType() != "Mul" {
			continue
		}
		m := nodes[mi]
		y, absorbed := -1, []int{di, i, ai}
		if f, ok := other(m, nodes[ai].GetOutput()[0]); ok && f == x { // (x·(erf+1))·0.5
			hi := only(m.GetOutput()[0])
			if hi < 0 || nodes[hi].GetOpType() != "Mul" {
				continue
			}
			if c, ok := other(nodes[hi], m.GetOutput()[0]); !ok || !is(c, 0.5) {
				continue
			}
			y, absorbed = hi, append(absorbed, mi)
		} else if ok { // (x·0.5)·(erf+1)
			hj, found := producer[f]
			if !found || nodes[hj].GetOpType() != "Mul" || only(f) != mi {
				continue
			}
			if c, ok := other(nodes[hj], x); !ok || !is(c, 0.5) {
				continue
			}
			y, absorbed = mi, append(absorbed, hj)
		}
		if y < 0 || !singleUse(absorbed, nodes, only, y) {
			continue
		}
		for _, j := range absorbed {
			live[j] = false
		}
		out[y] = &onnxpb.NodeProto{Name: proto.String(nodes[y].GetName()), OpType: proto.String("Gelu"), Input: []string{x}, Output: nodes[y].GetOutput()}
	}
	return out
}

// singleUse checks that every absorbed node's output feeds only the pattern (the division
// may be read elsewhere only if it is not absorbed; it always is here).
func singleUse(absorbed []int, nodes []*onnxpb.NodeProto, only func(string) int, y int) bool {
	for _, j := range absorbed {
		if len(nodes[j].GetOutput()) != 1 || only(nodes[j].GetOutput()[0]) < 0 {
			return false
		}
	}
	return true
}
