package render

import (
	"bytes"
	"context"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestFormatOf(t *testing.T) {
	tests := []struct {
		path string
		want Format
		err  string
	}{
		{"g.dot", DOT, ""},
		{"dir/g.GV", DOT, ""},
		{"g.svg", SVG, ""},
		{"g.PNG", PNG, ""},
		{"g.jpg", "", `unknown output format "jpg" of g.jpg, expected one of dot, svg, png`},
		{"graph", "", "has no extension, expected one of dot, svg, png"},
	}
	for _, tc := range tests {
		t.Run(tc.path, func(t *testing.T) {
			got, err := FormatOf(tc.path)
			if tc.err != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestWriteImage(t *testing.T) {
	p := compilePlan(t, planCases[0])
	g, err := Graph(p, Options{})
	require.NoError(t, err)
	var text bytes.Buffer
	require.NoError(t, WriteImage(context.Background(), &text, g, DOT))
	assert.Equal(t, g.String(), text.String())
	assert.Error(t, WriteImage(context.Background(), &text, g, "jpg"))

	t.Run("no dot", func(t *testing.T) {
		old := dotProgram
		dotProgram = "autopar-no-such-dot-program"
		defer func() { dotProgram = old }()
		var out bytes.Buffer
		err := WriteImage(context.Background(), &out, g, SVG)
		require.ErrorIs(t, err, ErrNoDot)
		assert.Contains(t, err.Error(), "autopar-no-such-dot-program")
		assert.Zero(t, out.Len(), "nothing is written without dot")
	})

	if _, err := exec.LookPath("dot"); err != nil {
		t.Skip("Graphviz's dot is not installed (make deps installs it)")
	}
	var svg, png bytes.Buffer
	require.NoError(t, WriteImage(context.Background(), &svg, g, SVG))
	assert.Contains(t, svg.String(), "<svg")
	assert.Contains(t, svg.String(), `id="cluster_stage0"`, "the stage's id reaches the SVG")
	require.NoError(t, WriteImage(context.Background(), &png, g, PNG))
	assert.True(t, bytes.HasPrefix(png.Bytes(), []byte("\x89PNG\r\n\x1a\n")), "a PNG signature")
}

func TestWriteSVG(t *testing.T) {
	s, err := Predict(compilePlan(t, planCases[1]))
	require.NoError(t, err)
	var svg bytes.Buffer
	require.NoError(t, Timeline(&svg, s))
	var out bytes.Buffer
	require.NoError(t, WriteSVG(context.Background(), &out, svg.Bytes(), SVG))
	assert.Equal(t, svg.String(), out.String())
	assert.ErrorContains(t, WriteSVG(context.Background(), &out, svg.Bytes(), DOT), "expected an .svg or .png file")

	t.Run("no rsvg-convert", func(t *testing.T) {
		old := rsvgProgram
		rsvgProgram = "autopar-no-such-rsvg-program"
		defer func() { rsvgProgram = old }()
		var out bytes.Buffer
		err := WriteSVG(context.Background(), &out, svg.Bytes(), PNG)
		require.ErrorIs(t, err, ErrNoRsvg)
		assert.Contains(t, err.Error(), "apt-get install librsvg2-bin")
		assert.Zero(t, out.Len(), "nothing is written without rsvg-convert")
	})

	if _, err := exec.LookPath("rsvg-convert"); err != nil {
		t.Skip("librsvg's rsvg-convert is not installed (make deps installs it)")
	}
	var png bytes.Buffer
	require.NoError(t, WriteSVG(context.Background(), &png, svg.Bytes(), PNG))
	assert.True(t, bytes.HasPrefix(png.Bytes(), []byte("\x89PNG\r\n\x1a\n")), "a PNG signature")
}
