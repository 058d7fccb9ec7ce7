package passes

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/autopar/autopar/frontend"
	"github.com/autopar/autopar/ir"
)

// The autodiff benchmarks: one family over the zoo's GPT sizes, each timing parse + verify
// + Grad (the budget the lead set: under 1 s and 500 MiB for GPT-39B), Grad alone, and the
// whole TrainingStep with Adam. Setup (reading the file) is outside the timer.

var benchModels = []string{"gpt-tiny", "gpt-1.3b", "gpt-39b"}

func benchSource(b *testing.B, name string) []byte {
	src, err := os.ReadFile(filepath.Join("..", "testdata", "models", name+".ir"))
	if err != nil {
		b.Skipf("%s: %v", name, err)
	}
	return src
}

func benchParse(b *testing.B, name string, src []byte) *ir.Graph {
	g, err := frontend.Parse(name+".ir", src)
	if err != nil {
		b.Fatal(err)
	}
	if err := ir.Verify(g); err != nil {
		b.Fatal(err)
	}
	return g
}

func benchGrad(b *testing.B, g *ir.Graph) *ir.Graph {
	out, _, err := Grad(g, g.Outputs[0].Value, g.Leaves(ir.OpParam))
	if err != nil {
		b.Fatal(err)
	}
	return out
}

func BenchmarkAutodiffGPT39B(b *testing.B) {
	for _, name := range benchModels {
		src := benchSource(b, name)
		b.Run(name+"/parse+verify+grad", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				benchGrad(b, benchParse(b, name, src))
			}
		})
		g := benchParse(b, name, src)
		b.Run(name+"/grad", func(b *testing.B) {
			b.ReportAllocs()
			var out *ir.Graph
			for b.Loop() {
				out = benchGrad(b, g)
			}
			b.ReportMetric(float64(len(out.Values)), "values")
		})
		b.Run(name+"/training_step_adam", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := TrainingStep(g, Optimizer{Kind: "adam", LR: 1e-4}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
