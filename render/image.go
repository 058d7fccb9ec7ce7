package render

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/emicklei/dot"
)

// Format is an output format of a graph.
type Format string

// The formats Graph's result can be written in. DOT is the text itself; SVG and PNG are
// laid out by Graphviz's dot program.
const (
	DOT Format = "dot"
	SVG Format = "svg"
	PNG Format = "png"
)

// Formats lists the formats FormatOf accepts, for messages.
var Formats = []Format{DOT, SVG, PNG}

// FormatOf picks the format from a file name's extension (.dot, .gv, .svg, .png, any
// case); any other is an error listing the ones there are.
func FormatOf(path string) (Format, error) {
	ext := strings.ToLower(strings.TrimPrefix(filepath.Ext(path), "."))
	switch ext {
	case "dot", "gv":
		return DOT, nil
	case "svg":
		return SVG, nil
	case "png":
		return PNG, nil
	}
	names := make([]string, len(Formats))
	for i, f := range Formats {
		names[i] = string(f)
	}
	if ext == "" {
		return "", fmt.Errorf("render: %s has no extension, expected one of %s", path, strings.Join(names, ", "))
	}
	return "", fmt.Errorf("render: unknown output format %q of %s, expected one of %s", ext, path, strings.Join(names, ", "))
}

// rsvgProgram is the librsvg command WriteSVG runs for PNG; tests point it elsewhere.
var rsvgProgram = "rsvg-convert"

// ErrNoRsvg is wrapped by WriteSVG's error when librsvg's rsvg-convert is not installed.
var ErrNoRsvg = errors.New("render: librsvg's rsvg-convert program is not installed")

// WriteSVG writes a picture drawn as SVG (the timeline) to w in format f: SVG as it is,
// PNG rasterized by `rsvg-convert -f png`, which fails with an error wrapping ErrNoRsvg
// when the program is not on PATH. DOT is an error: the picture is no graph. Nothing is
// written to w unless the conversion succeeds.
func WriteSVG(ctx context.Context, w io.Writer, svg []byte, f Format) error {
	switch f {
	case SVG:
		_, err := w.Write(svg)
		return err
	case PNG:
	default:
		return fmt.Errorf("render: the timeline is drawn as SVG, expected an .svg or .png file, not %s", f)
	}
	path, err := exec.LookPath(rsvgProgram)
	if err != nil {
		return fmt.Errorf("%w: png output runs %q, which is not on PATH (install librsvg: apt-get install librsvg2-bin, or make deps), or write .svg", ErrNoRsvg, rsvgProgram)
	}
	return runConverter(ctx, w, path, string(svg), "-f", "png")
}

// runConverter runs program with args on input and copies its output to w if it succeeds.
func runConverter(ctx context.Context, w io.Writer, path, input string, args ...string) error {
	if ctx == nil {
		ctx = context.Background()
	}
	var out, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Stdin = strings.NewReader(input)
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("render: %s %s failed: %v: %s", filepath.Base(path), strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	_, err := w.Write(out.Bytes())
	return err
}

// dotProgram is the Graphviz command WriteImage runs; tests point it elsewhere.
var dotProgram = "dot"

// ErrNoDot is wrapped by WriteImage's error when Graphviz's dot program is not installed.
var ErrNoDot = errors.New("render: Graphviz's dot program is not installed")

// WriteImage writes g to w in format f. DOT needs nothing; SVG and PNG run `dot -Tsvg` or
// `dot -Tpng`, and fail with an error wrapping ErrNoDot, naming the program and how to
// get it, when it is not on PATH. Nothing is written to w unless dot succeeds.
func WriteImage(ctx context.Context, w io.Writer, g *dot.Graph, f Format) error {
	text := g.String()
	switch f {
	case DOT:
		_, err := io.WriteString(w, text)
		return err
	case SVG, PNG:
	default:
		return fmt.Errorf("render: unknown format %q, expected dot, svg or png", f)
	}
	path, err := exec.LookPath(dotProgram)
	if err != nil {
		return fmt.Errorf("%w: %s output runs %q, which is not on PATH (install graphviz: apt-get install graphviz, or make deps), or write .dot", ErrNoDot, f, dotProgram)
	}
	return runConverter(ctx, w, path, text, "-T"+string(f))
}
