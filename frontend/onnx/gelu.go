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
	gm := &geluMatcher{nodes: nodes, known: known, users: map[string][]int{}, producer: map[string]int{}}
	for i, n := range nodes {
		if !live[i] {
			continue
		}
		for _, in := range n.GetInput() {
			gm.users[in] = append(gm.users[in], i)
		}
		for _, o := range n.GetOutput() {
			gm.producer[o] = i
		}
	}
	for i, e := range nodes {
		if !live[i] || e.GetOpType() != "Erf" || len(e.GetInput()) != 1 {
			continue
		}
		x, y, absorbed, ok := gm.match(i)
		if !ok {
			continue
		}
		for _, j := range absorbed {
			live[j] = false
		}
		out[y] = &onnxpb.NodeProto{Name: proto.String(nodes[y].GetName()), OpType: proto.String("Gelu"), Input: []string{x}, Output: nodes[y].GetOutput()}
	}
	return out
}

// geluMatcher indexes the live nodes by the tensors they read and write.
type geluMatcher struct {
	nodes    []*onnxpb.NodeProto
	known    func(string) *kernels.Tensor
	users    map[string][]int
	producer map[string]int
}

// only returns the one live user of name, or -1.
func (gm *geluMatcher) only(name string) int {
	if u := gm.users[name]; len(u) == 1 {
		return u[0]
	}
	return -1
}

// is reports whether name is a known one-element tensor equal to want.
func (gm *geluMatcher) is(name string, want float64) bool {
	t := gm.known(name)
	return t != nil && t.Len() == 1 && math.Abs(t.At(0)-want) <= 1e-6*math.Abs(want)
}

// other returns the input of a two-input node that is not name.
func other(n *onnxpb.NodeProto, name string) (string, bool) {
	in := n.GetInput()
	switch {
	case len(in) != 2:
		return "", false
	case name == in[0]:
		return in[1], true
	case name == in[1]:
		return in[0], true
	}
	return "", false
}

// op returns the node at index i if it has the given op type.
func (gm *geluMatcher) op(i int, typ string) (*onnxpb.NodeProto, bool) {
	if i < 0 || gm.nodes[i].GetOpType() != typ {
		return nil, false
	}
	return gm.nodes[i], true
}

// match tries the pattern around the Erf node ei: it returns x, the node whose output
// becomes gelu(x), and the nodes the pattern absorbs.
func (gm *geluMatcher) match(ei int) (x string, y int, absorbed []int, ok bool) {
	e := gm.nodes[ei]
	di, found := gm.producer[e.GetInput()[0]]
	if !found {
		return "", 0, nil, false
	}
	d, in := gm.nodes[di], gm.nodes[di].GetInput()
	switch {
	case len(in) != 2:
		return "", 0, nil, false
	case d.GetOpType() == "Div" && gm.is(in[1], math.Sqrt2), d.GetOpType() == "Mul" && gm.is(in[1], 1/math.Sqrt2):
		x = in[0]
	case d.GetOpType() == "Mul" && gm.is(in[0], 1/math.Sqrt2):
		x = in[1]
	default:
		return "", 0, nil, false
	}
	ai := gm.only(e.GetOutput()[0])
	a, isAdd := gm.op(ai, "Add")
	if c, ok := other(a, e.GetOutput()[0]); !isAdd || !ok || !gm.is(c, 1) {
		return "", 0, nil, false
	}
	mi := gm.only(a.GetOutput()[0])
	m, isMul := gm.op(mi, "Mul")
	f, ok := other(m, a.GetOutput()[0])
	if !isMul || !ok {
		return "", 0, nil, false
	}
	absorbed = []int{di, ei, ai}
	if f == x { // (x·(erf+1))·0.5
		h, isMul := gm.op(gm.only(m.GetOutput()[0]), "Mul")
		if c, ok := other(h, m.GetOutput()[0]); !isMul || !ok || !gm.is(c, 0.5) {
			return "", 0, nil, false
		}
		y, absorbed = gm.only(m.GetOutput()[0]), append(absorbed, mi)
	} else { // (x·0.5)·(erf+1)
		hj, found := gm.producer[f]
		h, isMul := gm.op(hj, "Mul")
		if c, ok := other(h, x); !found || !isMul || gm.only(f) != mi || !ok || !gm.is(c, 0.5) {
			return "", 0, nil, false
		}
		y, absorbed = mi, append(absorbed, hj)
	}
	return x, y, absorbed, singleUse(absorbed, gm.nodes, gm.only)
}

// singleUse checks that every absorbed node's output feeds only the pattern (the division
// may be read elsewhere only if it is not absorbed; it always is here).
func singleUse(absorbed []int, nodes []*onnxpb.NodeProto, only func(string) int) bool {
	for _, j := range absorbed {
		if len(nodes[j].GetOutput()) != 1 || only(nodes[j].GetOutput()[0]) < 0 {
			return false
		}
	}
	return true
}
