"""Shardings for JAX for model gpt, exported by autopar from gpt-tp2-pp2-mb1.plan.json.
Plan: batch 8 in 1 micro-batches (1f1b), 2 pipeline stage(s):
  stage 0: layers 0-0 on devices 0-1 as logical mesh (1, 2)
  stage 1: layers 1-1 on devices 2-3 as logical mesh (1, 2)

Each stage runs on its own submesh: a jax.sharding.Mesh with the named axes 'x' (logical
axis 0, the slow one across hosts) and 'y' (axis 1) over the devices listed in STAGES,
indices into jax.devices(). Every table maps a value's name in the model to (stage,
PartitionSpec); the comment gives its type (one micro-batch) and autopar's spec.

    meshes = make_meshes()
    params = shard_params(params, meshes)          # jax.device_put with each NamedSharding
    x = constrain('l0.mlp.gelu', x, meshes)       # inside jit: with_sharding_constraint
"""

import numpy as np
import jax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

AXES = ('x', 'y')

STAGES = [
    {'layers': (0, 0), 'mesh_shape': (1, 2), 'devices': (0, 1)},
    {'layers': (1, 1), 'mesh_shape': (1, 2), 'devices': (2, 3)},
]

# the trained parameters: name -> (stage, PartitionSpec)
PARAMS = {
    'wte': (0, P(None, None)),  # f32[64,32] RR
    # 'wte' is also read on stage 1 as P(None, None)
    'wpe': (0, P(None, None)),  # f32[16,32] RR
    'l0.ln1.gamma': (0, P(None)),  # f32[32] R
    'l0.ln1.beta': (0, P(None)),  # f32[32] R
    'l0.attn.qkv.w': (0, P(None, 'y')),  # f32[32,96] RS1
    'l0.attn.qkv.b': (0, P('y')),  # f32[96] S1
    'l0.attn.o.w': (0, P('y', None)),  # f32[32,32] S1R
    'l0.attn.o.b': (0, P(None)),  # f32[32] R
    'l0.ln2.gamma': (0, P(None)),  # f32[32] R
    'l0.ln2.beta': (0, P(None)),  # f32[32] R
    'l0.mlp.w1.w': (0, P(None, 'y')),  # f32[32,128] RS1
    'l0.mlp.w1.b': (0, P('y')),  # f32[128] S1
    'l0.mlp.w2.w': (0, P('y', None)),  # f32[128,32] S1R
    'l0.mlp.w2.b': (0, P(None)),  # f32[32] R
    'l1.ln1.gamma': (1, P(None)),  # f32[32] R
    'l1.ln1.beta': (1, P(None)),  # f32[32] R
    'l1.attn.qkv.w': (1, P(None, 'y')),  # f32[32,96] RS1
    'l1.attn.qkv.b': (1, P('y')),  # f32[96] S1
    'l1.attn.o.w': (1, P('y', None)),  # f32[32,32] S1R
    'l1.attn.o.b': (1, P(None)),  # f32[32] R
    'l1.ln2.gamma': (1, P(None)),  # f32[32] R
    'l1.ln2.beta': (1, P(None)),  # f32[32] R
    'l1.mlp.w1.w': (1, P(None, None)),  # f32[32,128] RR
    'l1.mlp.w1.b': (1, P(None)),  # f32[128] R
    'l1.mlp.w2.w': (1, P(None, None)),  # f32[128,32] RR
    'l1.mlp.w2.b': (1, P(None)),  # f32[32] R
    'lnf.gamma': (1, P(None)),  # f32[32] R
    'lnf.beta': (1, P(None)),  # f32[32] R
}

# the data inputs of one micro-batch: name -> (stage, PartitionSpec)
INPUTS = {
    'tokens': (0, P(None, None)),  # i32[8,16] RR
    'labels': (1, P('y', None)),  # i32[8,16] S1R
}

# the optimizer's state, named after its parameter: name -> (stage, PartitionSpec)
OPTIMIZER_STATE = {
    'wte.m': (0, P(None, 'y')),  # f32[64,32] RS1
    'wpe.m': (0, P(None, None)),  # f32[16,32] RR
    'l0.ln1.gamma.m': (0, P(None)),  # f32[32] R
    'l0.ln1.beta.m': (0, P(None)),  # f32[32] R
    'l0.attn.qkv.w.m': (0, P(None, 'y')),  # f32[32,96] RS1
    'l0.attn.qkv.b.m': (0, P('y')),  # f32[96] S1
    'l0.attn.o.w.m': (0, P('y', None)),  # f32[32,32] S1R
    'l0.attn.o.b.m': (0, P(None)),  # f32[32] R
    'l0.ln2.gamma.m': (0, P(None)),  # f32[32] R
    'l0.ln2.beta.m': (0, P(None)),  # f32[32] R
    'l0.mlp.w1.w.m': (0, P(None, 'y')),  # f32[32,128] RS1
    'l0.mlp.w1.b.m': (0, P('y')),  # f32[128] S1
    'l0.mlp.w2.w.m': (0, P('y', None)),  # f32[128,32] S1R
    'l0.mlp.w2.b.m': (0, P(None)),  # f32[32] R
    'l1.ln1.gamma.m': (1, P(None)),  # f32[32] R
    'l1.ln1.beta.m': (1, P(None)),  # f32[32] R
    'l1.attn.qkv.w.m': (1, P(None, 'y')),  # f32[32,96] RS1
    'l1.attn.qkv.b.m': (1, P('y')),  # f32[96] S1
    'l1.attn.o.w.m': (1, P('y', None)),  # f32[32,32] S1R
    'l1.attn.o.b.m': (1, P(None)),  # f32[32] R
    'l1.ln2.gamma.m': (1, P(None)),  # f32[32] R
    'l1.ln2.beta.m': (1, P(None)),  # f32[32] R
    'l1.mlp.w1.w.m': (1, P(None, None)),  # f32[32,128] RR
    'l1.mlp.w1.b.m': (1, P(None)),  # f32[128] R
    'l1.mlp.w2.w.m': (1, P(None, None)),  # f32[128,32] RR
    'l1.mlp.w2.b.m': (1, P(None)),  # f32[32] R
    'lnf.gamma.m': (1, P(None)),  # f32[32] R
    'lnf.beta.m': (1, P(None)),  # f32[32] R
}

# the forward pass's values, for with_sharding_constraint: name -> (stage, PartitionSpec)
ACTIVATIONS = {
    'tok_emb': (0, P(None, None, None)),  # f32[8,16,32] RRR
    'pos_emb': (0, P(None, None)),  # f32[16,32] RR
    'embed': (0, P(None, None, None)),  # f32[8,16,32] RRR
    'mask': (0, P(None, None)),  # bool[16,16] RR
    'l0.ln1.layer_norm': (0, P(None, None, None)),  # f32[8,16,32] RRR
    'l0.attn.qkv.einsum': (0, P(None, None, 'y')),  # f32[8,16,96] RRS1
    'l0.attn.qkv': (0, P(None, None, 'y')),  # f32[8,16,96] RRS1
    'l0.attn.qkv.heads': (0, P(None, None, 'y', None)),  # f32[8,16,4,24] RRS1R
    'l0.attn.q.heads': (0, P(None, None, 'y', None)),  # f32[8,16,4,8] RRS1R
    'l0.attn.k.heads': (0, P(None, None, 'y', None)),  # f32[8,16,4,8] RRS1R
    'l0.attn.v.heads': (0, P(None, None, 'y', None)),  # f32[8,16,4,8] RRS1R
    'l0.attn.scores': (0, P(None, 'y', None, None)),  # f32[8,4,16,16] RS1RR
    'l0.attn.scaled': (0, P(None, 'y', None, None)),  # f32[8,4,16,16] RS1RR
    'l0.attn.masked': (0, P(None, 'y', None, None)),  # f32[8,4,16,16] RS1RR
    'l0.attn.probs': (0, P(None, 'y', None, None)),  # f32[8,4,16,16] RS1RR
    'l0.attn.ctx': (0, P(None, None, 'y', None)),  # f32[8,16,4,8] RRS1R
    'l0.attn.ctx.merged': (0, P(None, None, 'y')),  # f32[8,16,32] RRS1
    'l0.attn.o.einsum': (0, P(None, None, None)),  # f32[8,16,32] RRR
    'l0.attn.o': (0, P(None, None, None)),  # f32[8,16,32] RRR
    'l0.res1': (0, P(None, None, None)),  # f32[8,16,32] RRR
    'l0.ln2.layer_norm': (0, P(None, None, None)),  # f32[8,16,32] RRR
    'l0.mlp.w1.einsum': (0, P(None, None, 'y')),  # f32[8,16,128] RRS1
    'l0.mlp.w1': (0, P(None, None, 'y')),  # f32[8,16,128] RRS1
    'l0.mlp.gelu': (0, P(None, None, 'y')),  # f32[8,16,128] RRS1
    'l0.mlp.w2.einsum': (0, P(None, None, None)),  # f32[8,16,32] RRR
    'l0.mlp.w2': (0, P(None, None, None)),  # f32[8,16,32] RRR
    'l0.res2': (0, P(None, None, None)),  # f32[8,16,32] RRR
    'l1.ln1.layer_norm': (1, P(None, None, None)),  # f32[8,16,32] RRR
    'l1.attn.qkv.einsum': (1, P(None, None, 'y')),  # f32[8,16,96] RRS1
    'l1.attn.qkv': (1, P(None, None, 'y')),  # f32[8,16,96] RRS1
    'l1.attn.qkv.heads': (1, P(None, None, 'y', None)),  # f32[8,16,4,24] RRS1R
    'l1.attn.q.heads': (1, P(None, None, 'y', None)),  # f32[8,16,4,8] RRS1R
    'l1.attn.k.heads': (1, P(None, None, 'y', None)),  # f32[8,16,4,8] RRS1R
    'l1.attn.v.heads': (1, P(None, None, 'y', None)),  # f32[8,16,4,8] RRS1R
    'l1.attn.scores': (1, P(None, 'y', None, None)),  # f32[8,4,16,16] RS1RR
    'l1.attn.scaled': (1, P(None, 'y', None, None)),  # f32[8,4,16,16] RS1RR
    'l1.attn.masked': (1, P(None, 'y', None, None)),  # f32[8,4,16,16] RS1RR
    'l1.attn.probs': (1, P(None, 'y', None, None)),  # f32[8,4,16,16] RS1RR
    'l1.attn.ctx': (1, P(None, None, 'y', None)),  # f32[8,16,4,8] RRS1R
    'l1.attn.ctx.merged': (1, P(None, None, 'y')),  # f32[8,16,32] RRS1
    'l1.attn.o.einsum': (1, P('y', None, None)),  # f32[8,16,32] S1RR
    'l1.attn.o': (1, P('y', None, None)),  # f32[8,16,32] S1RR
    'l1.res1': (1, P('y', None, None)),  # f32[8,16,32] S1RR
    'l1.ln2.layer_norm': (1, P('y', None, None)),  # f32[8,16,32] S1RR
    'l1.mlp.w1.einsum': (1, P('y', None, None)),  # f32[8,16,128] S1RR
    'l1.mlp.w1': (1, P('y', None, None)),  # f32[8,16,128] S1RR
    'l1.mlp.gelu': (1, P('y', None, None)),  # f32[8,16,128] S1RR
    'l1.mlp.w2.einsum': (1, P('y', None, None)),  # f32[8,16,32] S1RR
    'l1.mlp.w2': (1, P('y', None, None)),  # f32[8,16,32] S1RR
    'l1.res2': (1, P('y', None, None)),  # f32[8,16,32] S1RR
    'lnf.layer_norm': (1, P('y', None, None)),  # f32[8,16,32] S1RR
    'logits': (1, P('y', None, None)),  # f32[8,16,64] S1RR
    'ce': (1, P('y', None)),  # f32[8,16] S1R
    'loss': (1, P()),  # f32[] -
}


def make_mesh(stage, devices=None):
    """The Mesh of a stage over devices (default jax.devices())."""
    devices = jax.devices() if devices is None else list(devices)
    s = STAGES[stage]
    if max(s['devices']) >= len(devices):
        raise ValueError('stage %d needs devices %s, only %d are available'
                         % (stage, s['devices'], len(devices)))
    grid = np.array([devices[i] for i in s['devices']], dtype=object)
    return Mesh(grid.reshape(s['mesh_shape']), AXES)


def make_meshes(devices=None):
    """One Mesh per stage."""
    return [make_mesh(i, devices) for i in range(len(STAGES))]


def shardings(table, meshes):
    """name -> NamedSharding for one of the tables above."""
    return {name: NamedSharding(meshes[stage], spec) for name, (stage, spec) in table.items()}


def shard_params(params, meshes, table=PARAMS):
    """Places each array of the dict params (names as in the table) with its sharding.

    Arrays whose names the table does not list are returned unchanged."""
    out = dict(params)
    for name, sharding in shardings(table, meshes).items():
        if name in out:
            out[name] = jax.device_put(out[name], sharding)
    return out


def constrain(name, x, meshes, table=ACTIVATIONS):
    """x with the sharding the plan gives the value name, inside jax.jit."""
    stage, spec = table[name]
    return jax.lax.with_sharding_constraint(x, NamedSharding(meshes[stage], spec))
