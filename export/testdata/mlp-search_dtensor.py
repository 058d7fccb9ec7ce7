"""DTensor placements for PyTorch for model mlp, exported by autopar from mlp-search.plan.json.
Plan: batch 16 in 2 micro-batches (1f1b), 3 pipeline stage(s):
  stage 0: layers 0-0 on devices 0-1 as logical mesh (1, 2)
  stage 1: layers 1-1 on devices 2 as logical mesh (1, 1)
  stage 2: layers 2-3 on devices 3 as logical mesh (1, 1)

Each stage runs on its own submesh: a DeviceMesh with the dims 'x' (logical axis 0, the
slow one across hosts) and 'y' (axis 1) over the global ranks listed in STAGES. Every
table maps a value's name in the model to (stage, placements), one placement per mesh
dim: Shard(d) splits tensor dim d along that mesh dim (Shard(d) on both dims: mesh dim
'x' major), Replicate() copies, Partial() holds a partial sum. The comment gives the
value's type (one micro-batch) and autopar's spec, one entry per tensor dim.

    meshes = make_meshes('cuda')                   # on every rank: it is collective
    model_params = shard_params(dict(model.named_parameters()), meshes)
"""

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh

try:
    from torch.distributed.tensor import Partial, Replicate, Shard, distribute_tensor
except ImportError:  # torch < 2.4
    from torch.distributed._tensor import Replicate, Shard, distribute_tensor
    from torch.distributed._tensor.placement_types import _Partial as Partial

MESH_DIM_NAMES = ('x', 'y')

STAGES = [
    {'layers': (0, 0), 'mesh_shape': (1, 2), 'ranks': (0, 1)},
    {'layers': (1, 1), 'mesh_shape': (1, 1), 'ranks': (2,)},
    {'layers': (2, 3), 'mesh_shape': (1, 1), 'ranks': (3,)},
]

# the trained parameters: name -> (stage, placements)
PARAMS = {
    'l0.fc.w': (0, [Replicate(), Shard(1)]),  # f32[16,32] RS1
    'l0.fc.b': (0, [Replicate(), Shard(0)]),  # f32[32] S1
    'l1.fc.w': (1, [Replicate(), Replicate()]),  # f32[32,32] RR
    'l1.fc.b': (1, [Replicate(), Replicate()]),  # f32[32] R
    'logits.w': (2, [Replicate(), Replicate()]),  # f32[32,10] RR
    'logits.b': (2, [Replicate(), Replicate()]),  # f32[10] R
}

# the data inputs of one micro-batch: name -> (stage, placements)
INPUTS = {
    'x': (0, [Replicate(), Replicate()]),  # f32[8,16] RR
    'y': (2, [Replicate(), Replicate()]),  # i32[8] R
}

# the optimizer's state, named after its parameter: name -> (stage, placements)
OPTIMIZER_STATE = {
    'l0.fc.w.m': (0, [Replicate(), Shard(1)]),  # f32[16,32] RS1
    'l0.fc.b.m': (0, [Replicate(), Shard(0)]),  # f32[32] S1
    'l1.fc.w.m': (1, [Replicate(), Replicate()]),  # f32[32,32] RR
    'l1.fc.b.m': (1, [Replicate(), Replicate()]),  # f32[32] R
    'logits.w.m': (2, [Replicate(), Replicate()]),  # f32[32,10] RR
    'logits.b.m': (2, [Replicate(), Replicate()]),  # f32[10] R
}


def make_mesh(stage, device_type='cuda'):
    """The DeviceMesh of a stage. Every rank must call it, in the same order."""
    s = STAGES[stage]
    ranks = torch.tensor(s['ranks'], dtype=torch.int).reshape(s['mesh_shape'])
    return DeviceMesh(device_type, ranks, mesh_dim_names=MESH_DIM_NAMES)


def make_meshes(device_type='cuda'):
    """One DeviceMesh per stage, made on every rank."""
    return [make_mesh(i, device_type) for i in range(len(STAGES))]


def stage_of_rank(rank=None):
    """The stage whose mesh holds the rank (default this process's)."""
    rank = dist.get_rank() if rank is None else rank
    for i, s in enumerate(STAGES):
        if rank in s['ranks']:
            return i
    raise ValueError('rank %d is in no stage of the plan' % rank)


def shard_params(params, meshes, table=PARAMS):
    """The tensors of the dict params (names as in the table) that this rank's stage
    holds, each distributed with its placements. distribute_tensor is collective over
    the stage's mesh: every rank of the stage calls this with the same tensors."""
    stage = stage_of_rank()
    out = {}
    for name, (s, placements) in table.items():
        if s == stage and name in params:
            out[name] = distribute_tensor(params[name], meshes[s], placements)
    return out
