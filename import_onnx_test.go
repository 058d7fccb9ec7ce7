package autopar

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/frontend"
	"github.com/autopar/autopar/frontend/onnx"
)

// Models exported by a real PyTorch (testdata/onnx/export.py), imported, compiled and run
// on the runtime from PyTorch's weights, equal the serial run step by step.
func TestImportedONNXPlansEqualSerial(t *testing.T) {
	cases := []struct {
		file string
		imp  onnx.Options
		opts Options
	}{
		{"mlp", onnx.Options{Loss: "cross-entropy", Labels: "y"}, Options{Microbatches: 2}},
		{"gpt2-tiny", onnx.Options{}, Options{Microbatches: 2, Layers: 2}},
		{"cnn-tiny", onnx.Options{Loss: "cross-entropy", Labels: "y"}, Options{Microbatches: 1, Layers: 2}},
		{"moe-gate-tiny", onnx.Options{Loss: "cross-entropy", Labels: "y"}, Options{Microbatches: 2, Layers: 2}},
	}
	for _, tc := range cases {
		t.Run(tc.file, func(t *testing.T) {
			m, err := frontend.ImportONNX("testdata/onnx/"+tc.file+".onnx", tc.imp)
			require.NoError(t, err)
			p := compile(t, m.Graph, cluster(t, "cpu:2"), tc.opts)
			checkAgainstSerialFrom(t, p, 1e-4, m.Weights)
		})
	}
}
