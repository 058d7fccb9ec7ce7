package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRenderTimelineFormats(t *testing.T) {
	path, _ := explainPlan(t)
	dir := t.TempDir()
	var out bytes.Buffer
	err := runRender(context.Background(), &out, path, renderFlags{timeline: true, notation: "alpa", stage: -1, layer: -1, out: filepath.Join(dir, "t.dot")})
	require.ErrorContains(t, err, "expected a .svg or .png file")

	svg := filepath.Join(dir, "t.svg")
	require.NoError(t, runRender(context.Background(), &out, path, renderFlags{timeline: true, notation: "alpa", stage: -1, layer: -1, out: svg}))
	data, err := os.ReadFile(svg)
	require.NoError(t, err)
	assert.Contains(t, string(data), "the plan predicted", "the title says which step is the plan's")

	if _, err := exec.LookPath("rsvg-convert"); err != nil {
		t.Skip("librsvg's rsvg-convert is not installed (make deps installs it)")
	}
	png := filepath.Join(dir, "t.png")
	require.NoError(t, runRender(context.Background(), &out, path, renderFlags{timeline: true, notation: "alpa", stage: -1, layer: -1, out: png}))
	data, err = os.ReadFile(png)
	require.NoError(t, err)
	assert.True(t, bytes.HasPrefix(data, []byte("\x89PNG\r\n\x1a\n")), "a PNG signature")
}

func TestRenderOpsFilters(t *testing.T) {
	path, p := explainPlan(t)
	dir := t.TempDir()
	var out bytes.Buffer
	base := renderFlags{ops: true, notation: "alpa", stage: -1, layer: -1, maxNodes: 10, out: filepath.Join(dir, "g.dot")}
	err := runRender(context.Background(), &out, path, base)
	require.ErrorContains(t, err, "(every stage, every layer) has")
	assert.ErrorContains(t, err, "--force")

	f := base
	f.force = true
	require.NoError(t, runRender(context.Background(), &out, path, f))

	f = base
	f.stage, f.layer, f.maxNodes = 1, p.Stages[1].FirstLayer, 300
	require.NoError(t, runRender(context.Background(), &out, path, f))
	data, err := os.ReadFile(f.out)
	require.NoError(t, err)
	assert.Contains(t, string(data), "per device", "shard shapes beside global ones")

	f = base
	f.ops = false
	f.stage = 0
	assert.ErrorContains(t, runRender(context.Background(), &out, path, f), "expected --ops with them")
}
