"""DTensor placements for PyTorch for model gpt, exported by autopar from gpt-tp2-pp2-mb1.plan.json.
Plan: batch 8 in 1 micro-batches (1f1b), 2 pipeline stage(s):
  stage 0: layers 0-0 on devices 0-1 as logical mesh (1, 2)
  stage 1: layers 1-1 on devices 2-3 as logical mesh (1, 2)

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
    {'layers': (1, 1), 'mesh_shape': (1, 2), 'ranks': (2, 3)},
]

# the trained parameters: name -> (stage, placements)
PARAMS = {
    'wte': (0, [Replicate(), Replicate()]),  # f32[64,32] RR
    # 'wte' is also read on stage 1 as [Replicate(), Replicate()]
    'wpe': (0, [Replicate(), Replicate()]),  # f32[16,32] RR
    'l0.ln1.gamma': (0, [Replicate(), Replicate()]),  # f32[32] R
    'l0.ln1.beta': (0, [Replicate(), Replicate()]),  # f32[32] R
    'l0.attn.qkv.w': (0, [Replicate(), Shard(1)]),  # f32[32,96] RS1
    'l0.attn.qkv.b': (0, [Replicate(), Shard(0)]),  # f32[96] S1
    'l0.attn.o.w': (0, [Replicate(), Shard(0)]),  # f32[32,32] S1R
    'l0.attn.o.b': (0, [Replicate(), Replicate()]),  # f32[32] R
    'l0.ln2.gamma': (0, [Replicate(), Replicate()]),  # f32[32] R
    'l0.ln2.beta': (0, [Replicate(), Replicate()]),  # f32[32] R
    'l0.mlp.w1.w': (0, [Replicate(), Shard(1)]),  # f32[32,128] RS1
    'l0.mlp.w1.b': (0, [Replicate(), Shard(0)]),  # f32[128] S1
    'l0.mlp.w2.w': (0, [Replicate(), Shard(0)]),  # f32[128,32] S1R
    'l0.mlp.w2.b': (0, [Replicate(), Replicate()]),  # f32[32] R
    'l1.ln1.gamma': (1, [Replicate(), Replicate()]),  # f32[32] R
    'l1.ln1.beta': (1, [Replicate(), Replicate()]),  # f32[32] R
    'l1.attn.qkv.w': (1, [Replicate(), Shard(1)]),  # f32[32,96] RS1
    'l1.attn.qkv.b': (1, [Replicate(), Shard(0)]),  # f32[96] S1
    'l1.attn.o.w': (1, [Replicate(), Shard(0)]),  # f32[32,32] S1R
    'l1.attn.o.b': (1, [Replicate(), Replicate()]),  # f32[32] R
    'l1.ln2.gamma': (1, [Replicate(), Replicate()]),  # f32[32] R
    'l1.ln2.beta': (1, [Replicate(), Replicate()]),  # f32[32] R
    'l1.mlp.w1.w': (1, [Replicate(), Replicate()]),  # f32[32,128] RR
    'l1.mlp.w1.b': (1, [Replicate(), Replicate()]),  # f32[128] R
    'l1.mlp.w2.w': (1, [Replicate(), Replicate()]),  # f32[128,32] RR
    'l1.mlp.w2.b': (1, [Replicate(), Replicate()]),  # f32[32] R
    'lnf.gamma': (1, [Replicate(), Replicate()]),  # f32[32] R
    'lnf.beta': (1, [Replicate(), Replicate()]),  # f32[32] R
}

# the data inputs of one micro-batch: name -> (stage, placements)
INPUTS = {
    'tokens': (0, [Replicate(), Replicate()]),  # i32[8,16] RR
    'labels': (1, [Replicate(), Shard(0)]),  # i32[8,16] S1R
}

# the optimizer's state, named after its parameter: name -> (stage, placements)
OPTIMIZER_STATE = {
    'wte.m': (0, [Replicate(), Shard(1)]),  # f32[64,32] RS1
    'wpe.m': (0, [Replicate(), Replicate()]),  # f32[16,32] RR
    'l0.ln1.gamma.m': (0, [Replicate(), Replicate()]),  # f32[32] R
    'l0.ln1.beta.m': (0, [Replicate(), Replicate()]),  # f32[32] R
    'l0.attn.qkv.w.m': (0, [Replicate(), Shard(1)]),  # f32[32,96] RS1
    'l0.attn.qkv.b.m': (0, [Replicate(), Shard(0)]),  # f32[96] S1
    'l0.attn.o.w.m': (0, [Replicate(), Shard(0)]),  # f32[32,32] S1R
    'l0.attn.o.b.m': (0, [Replicate(), Replicate()]),  # f32[32] R
    'l0.ln2.gamma.m': (0, [Replicate(), Replicate()]),  # f32[32] R
    'l0.ln2.beta.m': (0, [Replicate(), Replicate()]),  # f32[32] R
    'l0.mlp.w1.w.m': (0, [Replicate(), Shard(1)]),  # f32[32,128] RS1
    'l0.mlp.w1.b.m': (0, [Replicate(), Shard(0)]),  # f32[128] S1
    'l0.mlp.w2.w.m': (0, [Replicate(), Shard(0)]),  # f32[128,32] S1R
    'l0.mlp.w2.b.m': (0, [Replicate(), Replicate()]),  # f32[32] R
    'l1.ln1.gamma.m': (1, [Replicate(), Replicate()]),  # f32[32] R
    'l1.ln1.beta.m': (1, [Replicate(), Replicate()]),  # f32[32] R
    'l1.attn.qkv.w.m': (1, [Replicate(), Shard(1)]),  # f32[32,96] RS1
    'l1.attn.qkv.b.m': (1, [Replicate(), Shard(0)]),  # f32[96] S1
    'l1.attn.o.w.m': (1, [Replicate(), Shard(0)]),  # f32[32,32] S1R
    'l1.attn.o.b.m': (1, [Replicate(), Replicate()]),  # f32[32] R
    'l1.ln2.gamma.m': (1, [Replicate(), Replicate()]),  # f32[32] R
    'l1.ln2.beta.m': (1, [Replicate(), Replicate()]),  # f32[32] R
    'l1.mlp.w1.w.m': (1, [Replicate(), Replicate()]),  # f32[32,128] RR
    'l1.mlp.w1.b.m': (1, [Replicate(), Replicate()]),  # f32[128] R
    'l1.mlp.w2.w.m': (1, [Replicate(), Replicate()]),  # f32[128,32] RR
    'l1.mlp.w2.b.m': (1, [Replicate(), Replicate()]),  # f32[32] R
    'lnf.gamma.m': (1, [Replicate(), Replicate()]),  # f32[32] R
    'lnf.beta.m': (1, [Replicate(), Replicate()]),  # f32[32] R
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
