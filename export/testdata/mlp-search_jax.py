"""Shardings for JAX for model mlp, exported by autopar from mlp-search.plan.json.
Plan: batch 16 in 2 micro-batches (1f1b), 3 pipeline stage(s):
  stage 0: layers 0-0 on devices 0-1 as logical mesh (1, 2)
  stage 1: layers 1-1 on devices 2 as logical mesh (1, 1)
  stage 2: layers 2-3 on devices 3 as logical mesh (1, 1)

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
    {'layers': (1, 1), 'mesh_shape': (1, 1), 'devices': (2,)},
    {'layers': (2, 3), 'mesh_shape': (1, 1), 'devices': (3,)},
]

# the trained parameters: name -> (stage, PartitionSpec)
PARAMS = {
    'l0.fc.w': (0, P(None, 'y')),  # f32[16,32] RS1
    'l0.fc.b': (0, P('y')),  # f32[32] S1
    'l1.fc.w': (1, P(None, None)),  # f32[32,32] RR
    'l1.fc.b': (1, P(None)),  # f32[32] R
    'logits.w': (2, P(None, None)),  # f32[32,10] RR
    'logits.b': (2, P(None)),  # f32[10] R
}

# the data inputs of one micro-batch: name -> (stage, PartitionSpec)
INPUTS = {
    'x': (0, P(None, None)),  # f32[8,16] RR
    'y': (2, P(None)),  # i32[8] R
}

# the optimizer's state, named after its parameter: name -> (stage, PartitionSpec)
OPTIMIZER_STATE = {
    'l0.fc.w.m': (0, P(None, 'y')),  # f32[16,32] RS1
    'l0.fc.b.m': (0, P('y')),  # f32[32] S1
    'l1.fc.w.m': (1, P(None, None)),  # f32[32,32] RR
    'l1.fc.b.m': (1, P(None)),  # f32[32] R
    'logits.w.m': (2, P(None, None)),  # f32[32,10] RR
    'logits.b.m': (2, P(None)),  # f32[10] R
}

# the forward pass's values, for with_sharding_constraint: name -> (stage, PartitionSpec)
ACTIVATIONS = {
    'l0.fc.matmul': (0, P(None, 'y')),  # f32[8,32] RS1
    'l0.fc': (0, P(None, 'y')),  # f32[8,32] RS1
    'l0.relu': (0, P(None, 'y')),  # f32[8,32] RS1
    'l1.fc.matmul': (1, P(None, None)),  # f32[8,32] RR
    'l1.fc': (1, P(None, None)),  # f32[8,32] RR
    'l1.relu': (1, P(None, None)),  # f32[8,32] RR
    'logits.matmul': (2, P(None, None)),  # f32[8,10] RR
    'logits': (2, P(None, None)),  # f32[8,10] RR
    'ce': (2, P(None)),  # f32[8] R
    'loss': (2, P()),  # f32[] -
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
