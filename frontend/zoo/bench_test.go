package zoo

import "testing"

// benchmarkBuild builds the named preset's graph b.N times; the model is made outside the
// timer.
func benchmarkBuild(b *testing.B, preset string) {
	m, err := NewPreset(preset)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := m.Build(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkBuildGPT39B builds the largest GPT of the paper (48 layers, 2129 values).
func BenchmarkBuildGPT39B(b *testing.B) { benchmarkBuild(b, "gpt-39b") }

// BenchmarkBuild is the family over the largest preset of each model.
func BenchmarkBuild(b *testing.B) {
	for _, p := range []string{"gpt-tiny", "gpt-39b", "moe-70b", "wresnet-13b"} {
		b.Run(p, func(b *testing.B) { benchmarkBuild(b, p) })
	}
}
