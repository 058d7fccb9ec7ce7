package onnx_test

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/frontend"
	"github.com/autopar/autopar/frontend/onnx"
	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/runtime/interp"
	"github.com/autopar/autopar/runtime/kernels"
)

const fixtures = "../../testdata/onnx"

type jsonTensor struct {
	DType string    `json:"dtype"`
	Shape []int     `json:"shape"`
	Data  []float64 `json:"data"`
}

type expected struct {
	Inputs  map[string]jsonTensor `json:"inputs"`
	Outputs map[string]jsonTensor `json:"outputs"`
}

func (j jsonTensor) tensor(t *testing.T) *kernels.Tensor {
	dt := map[string]ir.DType{"float32": ir.F32, "int64": ir.I64, "bool": ir.Bool}[j.DType]
	require.NotEqual(t, ir.Invalid, dt, "dtype %s", j.DType)
	return kernels.FromF64(dt, ir.Shape(j.Shape), j.Data)
}

func loadExpected(t *testing.T, name string) expected {
	data, err := os.ReadFile(filepath.Join(fixtures, name+".expected.json"))
	require.NoError(t, err)
	var e expected
	require.NoError(t, json.Unmarshal(data, &e))
	return e
}

// fixtureOptions is how each fixture is imported: the inference-only ones get a loss.
var fixtureOptions = map[string]onnx.Options{
	"mlp":               {Loss: "cross-entropy", Labels: "y"},
	"gpt2-tiny":         {},
	"gpt2-tiny-dynamic": {Batch: 2},
	"cnn-tiny":          {Loss: "cross-entropy", Labels: "y"},
	"moe-gate-tiny":     {Loss: "cross-entropy", Labels: "y"},
}

func importFixture(t *testing.T, name string) *onnx.Model {
	m, err := onnx.ImportFile(filepath.Join(fixtures, name+".onnx"), fixtureOptions[name])
	require.NoError(t, err)
	return m
}

// TestFixturesMatchPyTorch imports each fixture exported by testdata/onnx/export.py and
// runs it on the serial interpreter with PyTorch's weights and inputs: every output must
// match what PyTorch computed, to 1e-5 relative to the output's largest magnitude.
func TestFixturesMatchPyTorch(t *testing.T) {
	for name := range fixtureOptions {
		t.Run(name, func(t *testing.T) {
			m := importFixture(t, name)
			exp := loadExpected(t, name)
			feeds := interp.Feeds{}
			for n, w := range m.Weights {
				feeds[n] = w
			}
			gen, err := interp.GenerateInputs(m.Graph, 7) // the labels a --loss added
			require.NoError(t, err)
			for n, x := range gen {
				feeds[n] = x
			}
			for n, x := range exp.Inputs {
				irName, ok := m.Inputs[n]
				require.True(t, ok, "input %s", n)
				feeds[irName] = x.tensor(t)
			}
			res, err := interp.RunKeep(context.Background(), m.Graph, feeds)
			require.NoError(t, err)
			for n, want := range exp.Outputs {
				id, ok := m.Graph.Lookup(m.Outputs[n])
				require.True(t, ok, "output %s", n)
				got := res.Values[id]
				w := want.tensor(t)
				require.True(t, w.Type.Shape.Equal(got.Type.Shape), "output %s: shape %s, want %s", n, got.Type.Shape, w.Type.Shape)
				var diff, scale float64
				for i := range w.Len() {
					diff = math.Max(diff, math.Abs(got.At(i)-w.At(i)))
					scale = math.Max(scale, math.Abs(w.At(i)))
				}
				require.LessOrEqual(t, diff, 1e-5*scale, "output %s: max abs diff %g, scale %g", n, diff, scale)
				t.Logf("%s: max abs diff %.3g (rel %.3g)", n, diff, diff/scale)
			}
		})
	}
}

// The same file gives the same .ir text, and the text parses back to the same graph.
func TestImportIsDeterministicAndRoundTrips(t *testing.T) {
	var texts []string
	for range 2 {
		m := importFixture(t, "gpt2-tiny-dynamic")
		var b strings.Builder
		require.NoError(t, ir.Print(&b, m.Graph))
		texts = append(texts, b.String())
	}
	require.Equal(t, texts[0], texts[1])
	g, err := frontend.Parse("g.ir", []byte(texts[0]))
	require.NoError(t, err)
	var again strings.Builder
	require.NoError(t, ir.Print(&again, g))
	require.Equal(t, texts[0], again.String())
}
