package zoo

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/autopar/autopar/frontend"
	"github.com/autopar/autopar/ir"
)

// WResNet is the Wide-ResNet of Alpa's benchmark (Flax's ImageNet ResNet with a width
// factor), NCHW: a 7×7/2 stem convolution, batch norm, relu and a 3×3/2 max pool; four
// stages of residual blocks at Channels·2^i filters, the first block of stages 1..3 striding
// by 2; a global average pool, a linear classifier and the mean cross-entropy.
//
// Depths 50 and up use bottleneck blocks: 1×1 to f, 3×3 (strided) to f·Width, 1×1 to 4f,
// the last batch norm's scale starting at zero, and a strided 1×1 projection of the
// residual where the shape changes. Depths 10, 18 and 34 use basic blocks of two 3×3
// convolutions at f·Width. Batch norm runs in training mode (batch statistics).
type WResNet struct {
	Depth, Channels, Width, Image, Classes, Batch int
	DType                                         string
}

// bottleneckStages and basicStages give the blocks per stage of each supported depth:
// depth = 3·blocks + 2 for bottleneck blocks, 2·blocks + 2 for basic ones.
var (
	bottleneckStages = map[int][]int{14: {1, 1, 1, 1}, 26: {2, 2, 2, 2}, 50: {3, 4, 6, 3},
		101: {3, 4, 23, 3}, 152: {3, 8, 36, 3}, 200: {3, 24, 36, 3}}
	basicStages = map[int][]int{10: {1, 1, 1, 1}, 18: {2, 2, 2, 2}, 34: {3, 4, 6, 3}}
)

// NewWResNet returns the tiny default config: depth 14 (one bottleneck block per stage),
// 4 base channels, width 2, 32×32 images, 10 classes, batch 8.
func NewWResNet() *WResNet {
	return &WResNet{Depth: 14, Channels: 4, Width: 2, Image: 32, Classes: 10, Batch: 8, DType: "f32"}
}

// Name returns "wresnet".
func (m *WResNet) Name() string { return "wresnet" }

// Params lists the knobs.
func (m *WResNet) Params() []Param {
	return []Param{
		intParam("depth", "depth: "+depthList()+" (50 and up: bottleneck blocks)", &m.Depth),
		intParam("channels", "filters of the first stage (doubling per stage)", &m.Channels),
		intParam("width", "width factor of the 3×3 convolutions", &m.Width),
		intParam("image", "image height and width", &m.Image),
		intParam("classes", "output classes", &m.Classes),
		intParam("batch", "batch size", &m.Batch),
		stringParam("dtype", "dtype of params and activations (f32, f16, bf16)", &m.DType),
	}
}

func depthList() string {
	var ds []int
	for d := range bottleneckStages {
		ds = append(ds, d)
	}
	for d := range basicStages {
		ds = append(ds, d)
	}
	sort.Ints(ds)
	s := make([]string, len(ds))
	for i, d := range ds {
		s[i] = strconv.Itoa(d)
	}
	return strings.Join(s, ", ")
}

// resnet carries what the blocks read while building.
type resnet struct {
	b  *frontend.Builder
	dt ir.DType
}

// Build makes the forward graph; its output is the scalar loss.
func (m *WResNet) Build() (*ir.Graph, error) {
	k := &knobs{model: "wresnet"}
	k.positive("channels", m.Channels, "width", m.Width, "image", m.Image, "classes", m.Classes, "batch", m.Batch)
	stages, bottleneck := bottleneckStages[m.Depth], true
	if stages == nil {
		stages, bottleneck = basicStages[m.Depth], false
	}
	if stages == nil {
		k.fail("depth must be one of %s, got %d", depthList(), m.Depth)
	}
	r := &resnet{dt: k.dtype(m.DType)}
	if k.err != nil {
		return nil, k.err
	}
	b := frontend.NewBuilder("wresnet")
	r.b = b
	x := b.Input("images", r.dt, ir.Shape{m.Batch, 3, m.Image, m.Image}, 0)
	labels := b.Input("labels", ir.I32, ir.Shape{m.Batch}, 0, frontend.Limit(m.Classes))

	stem := b.Scope("stem")
	x = stem.Named("relu").Relu(r.batchNorm(stem.Scope("bn"), r.conv(stem, "conv", x, m.Channels, 7, 2), false))
	x = stem.Named("pool").MaxPool(x, []int{3, 3}, []int{2, 2}, []int{1, 1})
	block := 0
	for i, n := range stages {
		for j := 0; j < n; j++ {
			stride := 1
			if i > 0 && j == 0 {
				stride = 2
			}
			block++
			s := b.Scope(fmt.Sprintf("s%d.b%d", i, j)).Block(block)
			f := m.Channels << i
			if bottleneck {
				x = r.bottleneck(s, x, f, m.Width, stride)
			} else {
				x = r.basic(s, x, f*m.Width, stride)
			}
		}
	}
	hw := []int{x.Dim(2), x.Dim(3)}
	pooled := b.Named("pool").AvgPool(x, hw, hw, []int{0, 0})
	feat := b.Named("features").Reshape(pooled, ir.Shape{m.Batch, x.Dim(1)})
	logits := dense(b, feat, "fc", m.Classes, r.dt)
	loss := b.Named("loss").ReduceMean(b.Named("ce").SparseCrossEntropy(logits, labels), 0)
	b.Output(loss)
	return b.Build()
}

// conv is a k×k convolution to out channels with "same" padding, no bias (a batch norm
// follows), param NAME.w [out, in, k, k]; the result is named NAME.
func (r *resnet) conv(b *frontend.Builder, name string, x frontend.Value, out, k, stride int) frontend.Value {
	w := b.Param(name+".w", r.dt, ir.Shape{out, x.Dim(1), k, k})
	return b.Named(name).Conv2D(x, w, []int{stride, stride}, []int{k / 2, k / 2})
}

// batchNorm normalizes per channel with a learned scale (ones, or zeros for the last norm
// of a residual branch so that each block starts as the identity) and shift (zeros).
func (r *resnet) batchNorm(b *frontend.Builder, x frontend.Value, zeroScale bool) frontend.Value {
	c := x.Dim(1)
	scaleInit := frontend.Ones
	if zeroScale {
		scaleInit = frontend.Zeros
	}
	gamma := b.Param("gamma", r.dt, ir.Shape{c}, scaleInit)
	beta := b.Param("beta", r.dt, ir.Shape{c}, frontend.Zeros)
	return b.BatchNorm(x, gamma, beta, 1e-5)
}

// convBN is conv then batch norm, with relu unless last.
func (r *resnet) convBN(b *frontend.Builder, name string, x frontend.Value, out, k, stride int, last bool) frontend.Value {
	y := r.batchNorm(b.Scope(name+".bn"), r.conv(b, name, x, out, k, stride), last)
	if last {
		return y
	}
	return b.Named(name + ".relu").Relu(y)
}

// shortcut is x, or its strided 1×1 projection to out channels where the shape changes.
func (r *resnet) shortcut(b *frontend.Builder, x frontend.Value, out, stride int) frontend.Value {
	if x.Dim(1) == out && stride == 1 {
		return x
	}
	return r.batchNorm(b.Scope("proj.bn"), r.conv(b, "proj", x, out, 1, stride), false)
}

func (r *resnet) bottleneck(b *frontend.Builder, x frontend.Value, f, width, stride int) frontend.Value {
	y := r.convBN(b, "conv1", x, f, 1, 1, false)
	y = r.convBN(b, "conv2", y, f*width, 3, stride, false)
	y = r.convBN(b, "conv3", y, 4*f, 1, 1, true)
	return b.Named("out").Relu(b.Named("res").Add(r.shortcut(b, x, 4*f, stride), y))
}

func (r *resnet) basic(b *frontend.Builder, x frontend.Value, f, stride int) frontend.Value {
	y := r.convBN(b, "conv1", x, f, 3, stride, false)
	y = r.convBN(b, "conv2", y, f, 3, 1, true)
	return b.Named("out").Relu(b.Named("res").Add(r.shortcut(b, x, f, stride), y))
}
