package zoo

import (
	"fmt"
	"strings"
)

// Preset is a named config of a zoo model: the tiny test models and the sizes the Alpa
// paper benchmarks (OSDI'22, Table 4 and Fig. 7), with the batch sizes of Alpa's benchmark
// suite (GPT and MoE 1024 sequences, Wide-ResNet 1536 images).
type Preset struct {
	// Name is the preset's name ("gpt-1.3b"), also its file name in testdata/models.
	Name string
	// Model is the zoo name of the model it configures.
	Model string
	// Doc says where the config comes from.
	Doc string
	// Set applies the config to a model made by New(Model).
	Set func(Model)
	// Nominal is the parameter count the paper names the config by (0 for test models).
	Nominal float64
}

// gptPreset is Alpa's GPT benchmark config: seq 1024, vocab 51200, fp16, batch 1024.
func gptPreset(size string, nominal float64, layers, hidden, heads int) Preset {
	return Preset{Name: "gpt-" + size, Model: "gpt", Nominal: nominal,
		Doc: fmt.Sprintf("Alpa GPT-%s: %d layers, hidden %d, %d heads, seq 1024, vocab 51200, batch 1024, f16", strings.ToUpper(size), layers, hidden, heads),
		Set: func(m Model) {
			g := m.(*GPT)
			g.Layers, g.Hidden, g.Heads, g.Seq, g.Vocab, g.Batch, g.DType = layers, hidden, heads, 1024, 51200, 1024, "f16"
		}}
}

// moePreset is Alpa's MoE benchmark config: seq 1024, vocab 32000, 16 heads, expert groups
// of 2048 tokens, capacity factor 1, MLPs 8× wide, fp16, batch 1024.
func moePreset(size string, nominal float64, layers, hidden, experts int) Preset {
	return Preset{Name: "moe-" + size, Model: "moe", Nominal: nominal,
		Doc: fmt.Sprintf("Alpa MoE-%s: %d layers, hidden %d, %d experts, 16 heads, seq 1024, vocab 32000, group 2048, ffn 8, batch 1024, f16", strings.ToUpper(size), layers, hidden, experts),
		Set: func(m Model) {
			e := m.(*MoE)
			e.Layers, e.Hidden, e.Heads, e.Seq, e.Vocab, e.Batch = layers, hidden, 16, 1024, 32000, 1024
			e.Experts, e.Group, e.Capacity, e.FFN, e.DType = experts, 2048, 1, 8, "f16"
		}}
}

// wresnetPreset is Alpa's Wide-ResNet benchmark config: 224×224 images, 1024 classes,
// batch 1536, fp32.
func wresnetPreset(size string, nominal float64, depth, channels, width int) Preset {
	return Preset{Name: "wresnet-" + size, Model: "wresnet", Nominal: nominal,
		Doc: fmt.Sprintf("Alpa Wide-ResNet-%s: depth %d, %d base channels, width %d, image 224, 1024 classes, batch 1536, f32", strings.ToUpper(size), depth, channels, width),
		Set: func(m Model) {
			w := m.(*WResNet)
			w.Depth, w.Channels, w.Width, w.Image, w.Classes, w.Batch, w.DType = depth, channels, width, 224, 1024, 1536, "f32"
		}}
}

func tinyPreset(model, doc string) Preset {
	return Preset{Name: model + "-tiny", Model: model, Doc: doc, Set: func(Model) {}}
}

var presets = []Preset{
	tinyPreset("mlp", "test MLP: 2 hidden layers of 32, 16 inputs, 10 classes, batch 16"),
	tinyPreset("gpt", "test GPT: 2 layers, hidden 32, 4 heads, seq 16, vocab 64, batch 8"),
	tinyPreset("moe", "test MoE: 2 layers (one MoE), hidden 32, 4 heads, seq 16, vocab 64, 4 experts, groups of 64, batch 8"),
	tinyPreset("wresnet", "test Wide-ResNet: depth 14, 4 base channels, width 2, 32×32 images, 10 classes, batch 8"),

	gptPreset("350m", 350e6, 24, 1024, 16),
	gptPreset("760m", 760e6, 24, 1536, 16),
	gptPreset("1.3b", 1.3e9, 24, 2048, 32),
	gptPreset("2.6b", 2.6e9, 32, 2560, 32),
	gptPreset("6.7b", 6.7e9, 32, 4096, 32),
	gptPreset("15b", 15e9, 48, 5120, 40),
	gptPreset("39b", 39e9, 48, 8192, 64),

	moePreset("380m", 380e6, 8, 768, 8),
	moePreset("690m", 690e6, 8, 768, 16),
	moePreset("1.3b", 1.3e9, 16, 768, 16),
	moePreset("2.4b", 2.4e9, 16, 1024, 16),
	moePreset("10b", 10e9, 16, 1536, 32),
	moePreset("27b", 27e9, 16, 2048, 48),
	moePreset("70b", 70e9, 32, 2048, 64),

	wresnetPreset("250m", 250e6, 50, 160, 2),
	wresnetPreset("500m", 500e6, 50, 224, 2), // Alpa's suite_paper_wresnet.py: (224, 50, 224, 2, fp32)
	wresnetPreset("1b", 1e9, 50, 320, 2),
	wresnetPreset("2b", 2e9, 50, 448, 2),
	wresnetPreset("4b", 4e9, 50, 640, 2),
	wresnetPreset("6.8b", 6.8e9, 50, 320, 16),
	wresnetPreset("13b", 13e9, 101, 320, 16),
}

// Presets lists every preset: the tiny models, then GPT, MoE and Wide-ResNet by size.
func Presets() []Preset { return append([]Preset(nil), presets...) }

// PresetNames lists the presets' names in the order of Presets.
func PresetNames() []string {
	names := make([]string, len(presets))
	for i, p := range presets {
		names[i] = p.Name
	}
	return names
}

// NewPreset returns the model of the named preset, configured. Its knobs can still be
// changed before Build. An unknown name is an error listing the presets.
func NewPreset(name string) (Model, error) {
	for _, p := range presets {
		if p.Name == name {
			m, err := New(p.Model)
			if err != nil {
				panic("zoo: preset " + name + " names an unknown model: " + err.Error())
			}
			p.Set(m)
			return m, nil
		}
	}
	return nil, fmt.Errorf("unknown preset %q, want one of %s", name, strings.Join(PresetNames(), ", "))
}
