// Package kernels holds the tensor kernels of autopar: one dense implementation of every
// non-leaf op of the ir op table, shared by the serial reference interpreter
// (runtime/interp) and the parallel runtime, which calls them on local shards.
//
// A Tensor is row-major and stores its elements in one of three slices chosen by dtype:
// F32 for f32, f16 and bf16 (f16 and bf16 values are rounded to their precision after
// every op, so the storage is wide but the values are not), F64 for f64, Int for i32, i64
// and bool (0/1). f32 is computed in float32 (float32 BLAS for the products), f64 in
// float64: the two precisions never mix silently.
//
// Error contract: Eval checks its operands against the op's shape rule and the result type
// it is given, and returns an error, never panics, on a mismatch or a bad value (an id out
// of range, an integer division by zero). Helpers that take Go values directly (FromF64)
// panic on misuse, as documented on each.
//
// The package knows ops and tensors, not graphs, devices or plans.
package kernels
