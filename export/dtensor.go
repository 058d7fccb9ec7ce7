package export

import (
	"fmt"
	"strings"

	"github.com/autopar/autopar/mesh"
)

// dtensorModule writes the Python module of the PyTorch export: per stage a DeviceMesh
// over its ranks, and per param, data input and optimizer state its stage and DTensor
// placements (one per mesh axis, converted from autopar's one entry per tensor dim by
// mesh.Spec.Placements), with helpers to build the meshes and distribute the params.
func dtensorModule(p *Plan) (string, error) {
	var b strings.Builder
	b.WriteString(`"""` + strings.Join(header(p, "DTensor placements for PyTorch"), "\n") + `

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
`)
	for _, s := range p.Stages {
		fmt.Fprintf(&b, "    {'layers': (%d, %d), 'mesh_shape': (%d, %d), 'ranks': %s},\n",
			s.FirstLayer, s.LastLayer, s.Mesh[0], s.Mesh[1], pyInts(s.Devices))
	}
	b.WriteString("]\n")
	dtensorTable(&b, "PARAMS", "the trained parameters", p.valuesOf(Param))
	dtensorTable(&b, "INPUTS", "the data inputs of one micro-batch", p.valuesOf(Input))
	dtensorTable(&b, "OPTIMIZER_STATE", "the optimizer's state, named after its parameter", p.valuesOf(State))
	b.WriteString(dtensorHelpers)
	return b.String(), nil
}

func dtensorTable(b *strings.Builder, name, what string, vals []stageValue) {
	fmt.Fprintf(b, "\n# %s: name -> (stage, placements)\n%s = {\n", what, name)
	for _, v := range vals {
		ps := v.Spec.Placements()
		fmt.Fprintf(b, "    %s: (%d, [%s, %s]),  # %s %s\n", pyStr(v.Name), v.stage, ps[0], ps[1], v.Type(), specOrDash(v.Spec))
		for _, u := range v.AlsoOn {
			fmt.Fprintf(b, "    # %s is also read on stage %d as %s\n", pyStr(v.Name), u.Stage, mesh.FormatPlacements(u.Spec.Placements()))
		}
	}
	b.WriteString("}\n")
}

const dtensorHelpers = `

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
`
