package interp_test

import (
	"context"
	"testing"

	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/runtime/interp"
)

// feedsFor initializes params and state and draws inputs, outside any timer.
func feedsFor(b *testing.B, g *ir.Graph) interp.Feeds {
	f := interp.InitParams(g, 1)
	in, err := interp.GenerateInputs(g, 2)
	if err != nil {
		b.Fatal(err)
	}
	for k, v := range in {
		f[k] = v
	}
	return f
}

// BenchmarkInterpStep runs the tiny GPT serially: the forward graph alone, and the whole
// Adam training step (forward, backward, update).
func BenchmarkInterpStep(b *testing.B) {
	fwd, step := loadStep(b, gptTiny)
	for _, c := range []struct {
		name string
		g    *ir.Graph
	}{{"gpt-tiny/forward", fwd}, {"gpt-tiny/train-adam", step}} {
		b.Run(c.name, func(b *testing.B) {
			f := feedsFor(b, c.g)
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if _, err := interp.Run(context.Background(), c.g, f); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
