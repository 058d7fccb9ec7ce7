package frontend

import "github.com/autopar/autopar/frontend/onnx"

// ImportONNX imports the ONNX model at path (what torch.onnx.export writes) as a forward
// graph whose first output is the loss, with the values of its params; see package
// frontend/onnx for what it covers and onnx.Options for the loss and batch it may add.
func ImportONNX(path string, opts onnx.Options) (*onnx.Model, error) {
	return onnx.ImportFile(path, opts)
}
