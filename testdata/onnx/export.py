#!/usr/bin/python3
"""Exports the ONNX fixtures of autopar's importer from a real PyTorch, with the outputs
PyTorch computes for fixed inputs. Not run by `make test`: the .onnx files and the
*.expected.json files it writes are committed.

    apt-get install -y python3-torch python3-onnx   # Debian bookworm: torch 1.13, onnx 1.12
    /usr/bin/python3 testdata/onnx/export.py        # from the repository root

Each fixture is small (< 1 MB) and exercises the ops a model family exports:
  mlp            Gemm, Relu, Tanh, Sigmoid, LayerNorm's expansion at opset 13
                 (ReduceMean, Sub, Pow, Sqrt, Div), LogSoftmax
  gpt2-tiny      Gather (embeddings), LayerNormalization, MatMul, Split, the shape
                 subgraphs of view() (Shape, Gather, Unsqueeze, Concat, Reshape),
                 Transpose, Div, Where with a causal mask, Softmax, GELU's Erf expansion,
                 SoftmaxCrossEntropyLoss (a training graph: loss first, logits second)
  gpt2-tiny-dynamic  the same with a symbolic batch dim: Shape-dependent subgraphs
  cnn-tiny       Conv, BatchNormalization (training mode), Relu, MaxPool, AveragePool,
                 GlobalAveragePool, Flatten, Gemm
  moe-gate-tiny  Einsum, Softmax, ReduceMax, Equal, Cast, Unsqueeze, ReduceSum, Where
"""
import json
import math
import os

import numpy as np
import onnx
import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.ln = nn.LayerNorm(32)
        self.fc2 = nn.Linear(32, 24)
        self.fc3 = nn.Linear(24, 10)

    def forward(self, x):
        h = torch.relu(self.fc1(x))
        h = self.ln(h)
        h = torch.tanh(self.fc2(h)) * torch.sigmoid(h[:, :24])
        return F.log_softmax(self.fc3(h), dim=-1)


class Block(nn.Module):
    def __init__(self, d, heads, seq):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.out = nn.Linear(4 * d, d)
        self.register_buffer("mask", torch.tril(torch.ones(seq, seq, dtype=torch.bool)))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        hd = C // self.heads
        q = q.view(B, T, self.heads, hd).transpose(1, 2)
        k = k.view(B, T, self.heads, hd).transpose(1, 2)
        v = v.view(B, T, self.heads, hd).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hd)
        att = att.masked_fill(~self.mask[:T, :T], float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        x = x + self.proj(y)
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT2Tiny(nn.Module):
    def __init__(self, vocab=64, d=32, heads=2, seq=8, layers=2):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(seq, d)
        self.blocks = nn.ModuleList([Block(d, heads, seq) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, ids, labels):
        T = ids.size(1)
        pos = torch.arange(0, T, dtype=torch.long).unsqueeze(0)
        x = self.wte(ids) + self.wpe(pos)
        for b in self.blocks:
            x = b(x)
        logits = self.head(self.ln_f(x))
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), labels.view(-1))
        return loss, logits


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        # No bias before batch norm (it cancels, and its gradient is rounding noise).
        self.c1 = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.b1 = nn.BatchNorm2d(8)
        self.c2 = nn.Conv2d(8, 16, 3, padding=1)
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        h = F.max_pool2d(F.relu(self.b1(self.c1(x))), 2)
        h = F.avg_pool2d(F.relu(self.c2(h)), 2)
        h = F.adaptive_avg_pool2d(h, 1)
        return self.fc(torch.flatten(h, 1))


class MoEGate(nn.Module):
    def __init__(self, d=16, experts=4, hidden=24, classes=10):
        super().__init__()
        self.gate = nn.Linear(d, experts)
        self.w1 = nn.Parameter(torch.randn(experts, d, hidden) / math.sqrt(d))
        self.w2 = nn.Parameter(torch.randn(experts, hidden, d) / math.sqrt(hidden))
        self.head = nn.Linear(d, classes)

    def forward(self, x):
        probs = F.softmax(self.gate(x), dim=-1)                      # [t, e]
        top = probs.max(dim=-1, keepdim=True).values                 # ReduceMax
        keep = (probs == top).float()                                # top-1 routing mask
        weight = torch.where(keep > 0, probs, torch.zeros_like(probs))
        h = torch.relu(torch.einsum("td,edh->teh", x, self.w1))
        y = torch.einsum("teh,ehd->ted", h, self.w2)
        y = (y * weight.unsqueeze(-1)).sum(dim=1)
        return self.head(y + x)


def tensor_json(t):
    a = t.detach().cpu().numpy()
    return {"dtype": str(a.dtype), "shape": list(a.shape), "data": a.reshape(-1).tolist()}


def export(name, model, inputs, input_names, output_names, opset, training=torch.onnx.TrainingMode.EVAL,
           dynamic_axes=None):
    path = os.path.join(HERE, name + ".onnx")
    if training == torch.onnx.TrainingMode.TRAINING:
        model.train()
    else:
        model.eval()
    with torch.no_grad():
        torch.onnx.export(model, inputs, path, input_names=input_names, output_names=output_names,
                          opset_version=opset, training=training, do_constant_folding=True,
                          dynamic_axes=dynamic_axes)
        onnx.checker.check_model(onnx.load(path))
        # The expected outputs come from the same mode the graph was exported in; batch norm
        # in training mode normalizes by the batch statistics, as the ONNX graph does.
        outs = model(*inputs)
    if not isinstance(outs, tuple):
        outs = (outs,)
    exp = {"opset": opset,
           "inputs": {n: tensor_json(t) for n, t in zip(input_names, inputs)},
           "outputs": {n: tensor_json(t) for n, t in zip(output_names, outs)}}
    with open(os.path.join(HERE, name + ".expected.json"), "w") as f:
        json.dump(exp, f, separators=(",", ":"))
        f.write("\n")
    print(name, os.path.getsize(path), "bytes,", [tuple(t.shape) for t in outs])


def main():
    torch.manual_seed(0)
    export("mlp", MLP(), (torch.randn(4, 16),), ["x"], ["logp"], 13)

    torch.manual_seed(1)
    g = torch.Generator().manual_seed(2)
    ids = torch.randint(0, 64, (2, 8), generator=g)
    labels = torch.randint(0, 64, (2, 8), generator=g)
    gpt = GPT2Tiny()
    export("gpt2-tiny", gpt, (ids, labels), ["ids", "labels"], ["loss", "logits"], 17)
    # The same model with a symbolic batch: view()'s shapes are computed in the graph
    # (Shape, Gather, Unsqueeze, Concat, Reshape), which the importer folds given --batch.
    export("gpt2-tiny-dynamic", gpt, (ids, labels), ["ids", "labels"], ["loss", "logits"], 17,
           dynamic_axes={"ids": {0: "batch"}, "labels": {0: "batch"}})

    torch.manual_seed(3)
    export("cnn-tiny", CNN(), (torch.randn(4, 3, 8, 8),), ["x"], ["logits"], 15,
           training=torch.onnx.TrainingMode.TRAINING)

    torch.manual_seed(4)
    export("moe-gate-tiny", MoEGate(), (torch.randn(8, 16),), ["x"], ["logits"], 14)


if __name__ == "__main__":
    main()
