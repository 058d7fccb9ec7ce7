package render

import (
	"bytes"
	"io"
	"testing"

	"github.com/autopar/autopar"
)

var benchCases = []planCase{
	{"mlp-cpu4", "mlp-tiny", "cpu:4", autopar.Options{Microbatches: 4, Layers: 4}},
	{"gpt-cpu4-pp", "gpt-tiny", "cpu:4", autopar.Options{Microbatches: 4, Manual: &autopar.Manual{TP: 2, PP: 2, DP: 1}}},
}

// BenchmarkGraph builds the DOT text of a compiled plan, layer and op views.
func BenchmarkGraph(b *testing.B) {
	for _, c := range benchCases {
		p := compilePlan(b, c)
		for _, ops := range []bool{false, true} {
			name := c.name + "/layers"
			if ops {
				name = c.name + "/ops"
			}
			b.Run(name, func(b *testing.B) {
				for b.Loop() {
					g, err := Graph(p, Options{Ops: ops})
					if err != nil {
						b.Fatal(err)
					}
					_, _ = io.WriteString(io.Discard, g.String())
				}
			})
		}
	}
}

// BenchmarkTimeline simulates a plan's schedule and writes its SVG.
func BenchmarkTimeline(b *testing.B) {
	for _, c := range benchCases {
		p := compilePlan(b, c)
		b.Run(c.name, func(b *testing.B) {
			var buf bytes.Buffer
			for b.Loop() {
				buf.Reset()
				s, err := Predict(p)
				if err != nil {
					b.Fatal(err)
				}
				if err := Timeline(&buf, s); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
