// Package onnx imports ONNX models (what torch.onnx.export writes) as autopar graphs.
//
// Import decodes the protobuf with Go types generated from ONNX's own onnx.proto
// (package onnxpb), then lowers each node onto the IR's closed op table:
//
//   - arithmetic, comparisons and Where broadcast as numpy does, as the IR's do;
//   - MatMul is matmul (2-D) or an einsum (batched), Gemm a matmul or an einsum plus its
//     bias, Einsum an einsum;
//   - Softmax, LogSoftmax, the reductions, LayerNormalization, training-mode
//     BatchNormalization, Conv, MaxPool, AveragePool and the global pools map one to one
//     (plus reshapes for keepdims and conv bias);
//   - Reshape, Flatten, Unsqueeze, Squeeze are reshapes, Split is slices, Gather is gather
//     (behind a transpose when not along axis 0), Expand is broadcast;
//   - GELU's Erf expansion is recognized and becomes gelu (the IR has no erf), and
//     LayerNorm's expansion at opsets before 17 is imported op by op (ReduceMean, Sub, Pow,
//     Sqrt, Div);
//   - SoftmaxCrossEntropyLoss is sparse_cross_entropy and a mean or sum.
//
// Tensors known at import time (Constant, Shape, integer initializers, and every node whose
// inputs are all known) are folded by running the node on the serial interpreter, so the
// shape subgraphs of view() (Shape, Gather, Unsqueeze, Concat, Reshape) vanish. Float
// initializers are params, with their values in Model.Weights. The IR has no tensor
// literals, so a known tensor a runtime op needs must be uniform, an arange or a
// triangular mask (see consts.go); anything else is an error naming it.
//
// The package knows nothing of devices or plans: its output is an ir.Graph and tensors.
package onnx
