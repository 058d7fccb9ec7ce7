package onnx

import (
	"fmt"
	"slices"

	"github.com/autopar/autopar/ir"
)

// lowerLayerNorm maps LayerNormalization over the last axis onto layer_norm; a missing
// bias is a zero constant.
func lowerLayerNorm(n *node) error {
	x, err := n.rt(0)
	if err != nil {
		return err
	}
	xt := n.im.g.Value(x).Type
	ax, err := axis(n.attrInt("axis", -1), xt.Shape.Rank())
	if err != nil {
		return err
	}
	if ax != xt.Shape.Rank()-1 {
		return fmt.Errorf("axis %d: only normalization over the last axis is supported", n.attrInt("axis", -1))
	}
	gamma, err := n.rt(1)
	if err != nil {
		return err
	}
	var beta ir.ValueID
	if n.in(2) != nil {
		beta, err = n.rt(2)
	} else {
		beta, err = n.im.scalar(n.outName(0)+".bias", 0, xt.DType, ir.Shape{xt.Shape[ax]})
	}
	if err != nil {
		return err
	}
	id, err := n.emit(ir.OpLayerNorm, "", []ir.ValueID{x, gamma, beta}, ir.Attrs{}.With("eps", float64(float32(n.attrFloat("epsilon", 1e-5)))))
	n.set(0, id)
	return err
}

// lowerBatchNorm maps training-mode BatchNormalization (batch statistics, what
// torch.onnx.export writes with training=TrainingMode.TRAINING) onto batch_norm. Inference
// mode normalizes by running statistics, which a trainer does not: it is refused with the
// export that gives the training graph.
func lowerBatchNorm(n *node) error {
	if n.attrInt("training_mode", 0) == 0 {
		return fmt.Errorf("inference mode (running statistics) is not supported: autopar trains, with batch statistics; export with torch.onnx.export(..., training=torch.onnx.TrainingMode.TRAINING)")
	}
	var args [3]ir.ValueID
	for i := range args {
		id, err := n.rt(i)
		if err != nil {
			return err
		}
		args[i] = id
	}
	id, err := n.emit(ir.OpBatchNorm, "", args[:], ir.Attrs{}.With("eps", float64(float32(n.attrFloat("epsilon", 1e-5)))))
	n.set(0, id)
	return err
}

// window reads the 2-D window attributes shared by Conv and pooling: symmetric pads, unit
// dilations, no auto_pad.
func window(n *node, kernel []int) (stride, pad []int, err error) {
	if len(kernel) != 2 {
		return nil, nil, fmt.Errorf("kernel %v: only 2-D windows are supported", kernel)
	}
	if ap := n.attrString("auto_pad", "NOTSET"); ap != "NOTSET" && ap != "" {
		return nil, nil, fmt.Errorf("auto_pad=%s is not supported: export with explicit pads", ap)
	}
	if d, ok := n.attrInts("dilations"); ok && slices.ContainsFunc(d, func(x int) bool { return x != 1 }) {
		return nil, nil, fmt.Errorf("dilations %v are not supported", d)
	}
	stride, ok := n.attrInts("strides")
	if !ok {
		stride = []int{1, 1}
	}
	pads, ok := n.attrInts("pads")
	if !ok {
		pads = []int{0, 0, 0, 0}
	}
	if len(stride) != 2 || len(pads) != 4 || pads[0] != pads[2] || pads[1] != pads[3] {
		return nil, nil, fmt.Errorf("strides %v and pads %v: want 2 strides and symmetric pads", stride, pads)
	}
	if n.attrInt("ceil_mode", 0) != 0 {
		return nil, nil, fmt.Errorf("ceil_mode=1 is not supported")
	}
	return stride, pads[:2], nil
}

func lowerConv(n *node) error {
	if g := n.attrInt("group", 1); g != 1 {
		return fmt.Errorf("group %d is not supported (grouped and depthwise convolutions)", g)
	}
	x, err := n.rt(0)
	if err != nil {
		return err
	}
	w, err := n.rt(1)
	if err != nil {
		return err
	}
	ws := n.im.g.Value(w).Type.Shape
	if ws.Rank() != 4 {
		return fmt.Errorf("only 2-D convolutions are supported, the weight is %s", ws)
	}
	stride, pad, err := window(n, []int(ws[2:]))
	if err != nil {
		return err
	}
	suffix := ""
	if n.in(2) != nil {
		suffix = "conv"
	}
	id, err := n.emit(ir.OpConv2D, suffix, []ir.ValueID{x, w}, ir.Attrs{}.With("stride", stride).With("pad", pad))
	if err != nil || suffix == "" {
		n.set(0, id)
		return err
	}
	b, err := n.rt(2)
	if err != nil {
		return err
	}
	b, err = n.emit(ir.OpReshape, "bias", []ir.ValueID{b}, ir.Attrs{}.With("shape", []int{ws[0], 1, 1}))
	if err != nil {
		return err
	}
	id, err = n.emit(ir.OpAdd, "", []ir.ValueID{id, b}, nil)
	n.set(0, id)
	return err
}

// pool lowers MaxPool and AveragePool. The IR's average divides by the whole window,
// padding included, so a padded AveragePool must say count_include_pad=1.
func pool(op ir.Op) lowerFn {
	return func(n *node) error {
		kernel, _ := n.attrInts("kernel_shape")
		stride, pad, err := window(n, kernel)
		if err != nil {
			return err
		}
		if n.attrInt("storage_order", 0) != 0 {
			return fmt.Errorf("storage_order=1 is not supported")
		}
		if op == ir.OpAvgPool && (pad[0] != 0 || pad[1] != 0) && n.attrInt("count_include_pad", 0) == 0 {
			return fmt.Errorf("padded average pooling must count the padding (count_include_pad=1)")
		}
		x, err := n.rt(0)
		if err != nil {
			return err
		}
		id, err := n.emit(op, "", []ir.ValueID{x}, ir.Attrs{}.With("window", kernel).With("stride", stride).With("pad", pad))
		n.set(0, id)
		return err
	}
}

// globalPool reduces the spatial dims and keeps them as 1s.
func globalPool(op ir.Op) lowerFn {
	return func(n *node) error {
		x, err := n.rt(0)
		if err != nil {
			return err
		}
		s := n.im.g.Value(x).Type.Shape
		if s.Rank() < 3 {
			return fmt.Errorf("input is %s: want [N, C, spatial...]", s)
		}
		r, err := n.emit(op, "reduced", []ir.ValueID{x}, ir.Attrs{}.With("axes", allAxes(s.Rank())[2:]))
		if err != nil {
			return err
		}
		kept := s.Clone()
		for i := 2; i < len(kept); i++ {
			kept[i] = 1
		}
		id, err := n.emit(ir.OpReshape, "", []ir.ValueID{r}, ir.Attrs{}.With("shape", []int(kept)))
		n.set(0, id)
		return err
	}
}
