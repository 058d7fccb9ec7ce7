// Package onnxpb holds the Go types of ONNX's protobuf schema, generated from onnx.proto
// (copied from Debian's python3-onnx 1.12, Apache-2.0, license header kept) by protoc 3.21
// and protoc-gen-go v1.36.11. Regenerate with `go generate` (needs protoc and
// protoc-gen-go); `make test` does not.
package onnxpb

//go:generate protoc --go_out=. --go_opt=paths=source_relative --go_opt=Monnx.proto=github.com/autopar/autopar/frontend/onnx/onnxpb onnx.proto
