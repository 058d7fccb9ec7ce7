// Package zoo builds the benchmark models of the Alpa paper (OSDI'22) as ir graphs with the
// frontend builder: an MLP, GPT, a GShard mixture-of-experts transformer and Wide-ResNet.
//
// Every model takes its full config (layers, hidden size, heads, batch, ...) through
// exported fields or the Params knobs, and Build returns the forward graph whose first
// output is the scalar loss; autodiff and the optimizer are passes, not the zoo's business.
// Presets name the configs the paper measured (gpt-1.3b, moe-10b, wresnet-2b, ...) with the
// batch sizes of Alpa's benchmark suite, plus tiny versions small enough for the serial
// interpreter (gpt-tiny, ...). testdata/models holds every preset printed as .ir.
//
// Ops are named by layer and block (l3.attn.q, l3.mlp.w1, s2.b1.conv2) for people. What a
// pass learns of the model's structure it reads from the marks: each transformer layer of
// GPT, MoE and the MLP's layers are one ir.Block (frontend.Builder.Block), which the
// sharding pass ties when identical. Wide-ResNet marks none yet (see docs/DECISIONS.md).
//
// The zoo emits nothing but ir graphs: it knows no devices, meshes or costs.
package zoo
