"""Imports and runs modules written by `autopar export` against the stand-ins in pystubs/.

For each module it builds every stage's mesh, places every listed tensor with the
module's own helpers, and checks each table entry against autopar's spec written in the
entry's comment, converted here independently of the Go code: JAX's PartitionSpec has
one entry per tensor dim ('x' = S0, 'y' = S1, ('x', 'y') = S01, None = R); DTensor's
placements one per mesh axis. Usage: check_exports.py MODULE.py... (exit status 1 on a
mismatch)."""
import importlib.util
import os
import re
import sys

sys.dont_write_bytecode = True  # keep testdata free of __pycache__
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), 'pystubs'))
import torch.distributed as dist  # noqa: E402  (the stand-in)
from torch.distributed.tensor import Partial, Replicate, Shard  # noqa: E402

ENTRY = re.compile(r"^    '([^']+)': \((\d+), .*\),  # \S+ (\S+)$")
DIM = re.compile(r'R|S01|S0|S1')


def alpa_dims(spec):
    """autopar's spec text, without partial, as a list of axis sets."""
    spec = spec.split('+P')[0]
    if spec == '-':
        return []
    dims = DIM.findall(spec)
    assert ''.join(dims) == spec, spec
    return [{'R': set(), 'S0': {0}, 'S1': {1}, 'S01': {0, 1}}[d] for d in dims]


def expected_entries(path):
    out = {}
    with open(path) as f:
        for line in f:
            m = ENTRY.match(line.rstrip('\n'))
            if m:
                out[m.group(1)] = (int(m.group(2)), alpa_dims(m.group(3)))
    return out


def load(path):
    spec = importlib.util.spec_from_file_location('exported', path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def check_jax(mod, entries):
    meshes = mod.make_meshes()
    for i, s in enumerate(mod.STAGES):
        m = meshes[i]
        assert m.axis_names == ('x', 'y'), m.axis_names
        assert m.devices.shape == tuple(s['mesh_shape']), (m.devices.shape, s)
        assert [d.id for d in m.devices.flat()] == list(s['devices'])
    names = {'x': 0, 'y': 1}
    n = 0
    for table in (mod.PARAMS, mod.INPUTS, mod.OPTIMIZER_STATE, mod.ACTIVATIONS):
        placed = mod.shard_params({k: 'tensor:' + k for k in table}, meshes, table)
        for name, (stage, spec) in table.items():
            want_stage, want = entries[name]
            got = []
            for part in spec:
                axes = part if isinstance(part, tuple) else (() if part is None else (part,))
                got.append({names[a] for a in axes})
                assert list(axes) == sorted(axes, key=names.get), ('major axis first', name, spec)
            assert (stage, got) == (want_stage, want), (name, spec, entries[name])
            kind, x, sharding = placed[name]
            assert (kind, x) == ('placed', 'tensor:' + name) and sharding.mesh is meshes[stage]
            n += 1
    some = next(iter(mod.ACTIVATIONS))
    kind, _, sharding = mod.constrain(some, 'x', meshes)
    assert kind == 'constrained' and sharding.spec == mod.ACTIVATIONS[some][1]
    return n


def check_dtensor(mod, entries):
    meshes = mod.make_meshes('cpu')
    for i, s in enumerate(mod.STAGES):
        m = meshes[i]
        assert m.mesh_dim_names == ('x', 'y') and m.mesh.shape == tuple(s['mesh_shape'])
        assert m.mesh.items == list(s['ranks'])
    n = 0
    for table in (mod.PARAMS, mod.INPUTS, mod.OPTIMIZER_STATE):
        for name, (stage, placements) in table.items():
            want_stage, want = entries[name]
            got = [set() for _ in want]
            assert len(placements) == 2, (name, placements)
            for axis, p in enumerate(placements):
                if isinstance(p, Shard):
                    got[p.dim].add(axis)
                else:
                    assert isinstance(p, (Replicate, Partial)), p
            assert (stage, got) == (want_stage, want), (name, placements, entries[name])
            n += 1
        for i, s in enumerate(mod.STAGES):
            dist.RANK = s['ranks'][0]
            out = mod.shard_params({k: 'tensor:' + k for k in table}, meshes, table)
            mine = sorted(k for k, (st, _) in table.items() if st == i)
            assert sorted(out) == mine, (i, sorted(out), mine)
            for k in mine:
                assert out[k][2] is meshes[i] and out[k][3] == table[k][1]
    return n


def main(paths):
    for path in paths:
        mod, entries = load(path), expected_entries(path)
        if hasattr(mod, 'ACTIVATIONS'):
            n = check_jax(mod, entries)
        else:
            n = check_dtensor(mod, entries)
        assert n == len(entries) and n > 0, (path, n, len(entries))
        print('%s: %d entries match' % (path, n))


if __name__ == '__main__':
    main(sys.argv[1:])
