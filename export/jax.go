package export

import (
	"fmt"
	"strings"

	"github.com/autopar/autopar/mesh"
)

// annotated reports whether an activation gets a sharding annotation: constants and
// iotas are made whole on every device and never need one.
func annotated(v *Value) bool { return v.Op != "constant" && v.Op != "iota" }

// jaxModule writes the Python module of the JAX export: per stage a Mesh with named axes
// over its devices, and per param, data input, optimizer state and annotated activation
// its stage and PartitionSpec, with helpers to make the NamedShardings and apply them.
func jaxModule(p *Plan) (string, error) {
	var b strings.Builder
	b.WriteString(`"""` + strings.Join(header(p, "Shardings for JAX"), "\n") + `

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
`)
	for _, s := range p.Stages {
		fmt.Fprintf(&b, "    {'layers': (%d, %d), 'mesh_shape': (%d, %d), 'devices': %s},\n",
			s.FirstLayer, s.LastLayer, s.Mesh[0], s.Mesh[1], pyInts(s.Devices))
	}
	b.WriteString("]\n")
	jaxTable(&b, "PARAMS", "the trained parameters", p.valuesOf(Param))
	jaxTable(&b, "INPUTS", "the data inputs of one micro-batch", p.valuesOf(Input))
	jaxTable(&b, "OPTIMIZER_STATE", "the optimizer's state, named after its parameter", p.valuesOf(State))
	var acts []stageValue
	for _, v := range p.valuesOf(Activation) {
		if annotated(v.Value) {
			acts = append(acts, v)
		}
	}
	jaxTable(&b, "ACTIVATIONS", "the forward pass's values, for with_sharding_constraint", acts)
	b.WriteString(jaxHelpers)
	return b.String(), nil
}

// jaxTable writes one name -> (stage, PartitionSpec) table. A partial spec has no
// PartitionSpec that every JAX version reads, so it is written as a comment.
func jaxTable(b *strings.Builder, name, what string, vals []stageValue) {
	fmt.Fprintf(b, "\n# %s: name -> (stage, PartitionSpec)\n%s = {\n", what, name)
	for _, v := range vals {
		comment := fmt.Sprintf("  # %s %s", v.Type(), specOrDash(v.Spec))
		if v.Spec.Partial != mesh.AxesNone {
			fmt.Fprintf(b, "    # %s: a partial sum over mesh axes %s, not annotated%s\n", pyStr(v.Name), v.Spec.Partial.Digits(), comment)
			continue
		}
		fmt.Fprintf(b, "    %s: (%d, %s),%s\n", pyStr(v.Name), v.stage, v.Spec.JAX(), comment)
		for _, u := range v.AlsoOn {
			fmt.Fprintf(b, "    # %s is also read on stage %d as %s\n", pyStr(v.Name), u.Stage, u.Spec.JAX())
		}
	}
	b.WriteString("}\n")
}

func specOrDash(s mesh.Spec) string {
	if t := s.String(); t != "" {
		return t
	}
	return "-"
}

const jaxHelpers = `

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
`
