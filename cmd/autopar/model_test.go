package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/frontend"
	"github.com/autopar/autopar/ir"
)

func TestModelCommand(t *testing.T) {
	golden, err := os.ReadFile("../../testdata/models/gpt-tiny.ir")
	require.NoError(t, err)
	var out bytes.Buffer
	require.NoError(t, runModel(&out, "gpt-tiny", nil))
	assert.Equal(t, string(golden), out.String(), "a preset prints its testdata/models file")

	out.Reset()
	require.NoError(t, runModel(&out, "gpt", nil))
	assert.Equal(t, string(golden), out.String(), "the gpt defaults are gpt-tiny")

	out.Reset()
	require.NoError(t, runModel(&out, "mlp", []string{"--layers", "1", "--hidden", "8", "--dtype=f64"}))
	g, err := frontend.Parse("mlp.ir", out.Bytes())
	require.NoError(t, err)
	_, ok := g.Lookup("l0.fc.w")
	assert.True(t, ok)
	_, ok = g.Lookup("l1.fc.w")
	assert.False(t, ok, "--layers 1 makes one hidden layer")
	id, _ := g.Lookup("l0.fc.w")
	assert.Equal(t, ir.Type{DType: ir.F64, Shape: ir.Shape{16, 8}}, g.Value(id).Type)

	out.Reset()
	path := filepath.Join(t.TempDir(), "m.ir")
	require.NoError(t, runModel(&out, "gpt-350m", []string{"--layers", "2", "-o", path}))
	assert.Empty(t, out.String(), "-o writes the file, not stdout")
	file, err := os.ReadFile(path)
	require.NoError(t, err)
	g, err = frontend.Parse(path, file)
	require.NoError(t, err)
	id, ok = g.Lookup("wte")
	require.True(t, ok)
	assert.Equal(t, "f16[51200,1024]", g.Value(id).Type.String(), "a preset keeps its config under overrides")
	_, ok = g.Lookup("l2.res2")
	assert.False(t, ok)
}

func TestModelCommandErrors(t *testing.T) {
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"bert", nil, `unknown model "bert", want one of gpt, mlp, moe, wresnet; presets: mlp-tiny, gpt-tiny,`},
		{"gpt", []string{"--bogus", "1"}, "unknown flag: --bogus"},
		{"gpt", []string{"extra"}, `model gpt: unexpected argument "extra"`},
		{"gpt", []string{"--hidden", "30"}, "gpt: hidden 30 is not divisible by heads 4"},
		{"gpt", []string{"--layers", "two"}, `invalid argument "two" for "--layers"`},
		{"wresnet", []string{"--depth", "7"}, "wresnet: depth must be one of"},
	}
	for _, c := range cases {
		var out bytes.Buffer
		err := runModel(&out, c.name, c.args)
		if assert.Error(t, err, "%s %v", c.name, c.args) {
			assert.Contains(t, err.Error(), c.want)
		}
		assert.Empty(t, out.String())
	}
}
