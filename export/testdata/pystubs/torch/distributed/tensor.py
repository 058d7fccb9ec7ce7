class Placement:
    def __eq__(self, other):
        return type(self) is type(other) and vars(self) == vars(other)

    def __repr__(self):
        return '%s(%s)' % (type(self).__name__, ', '.join(str(v) for v in vars(self).values()))


class Shard(Placement):
    def __init__(self, dim):
        self.dim = dim


class Replicate(Placement):
    pass


class Partial(Placement):
    pass


def distribute_tensor(t, mesh, placements):
    if len(placements) != len(mesh.mesh.shape):
        raise ValueError('%d placements for a %d-D mesh' % (len(placements), len(mesh.mesh.shape)))
    return ('distributed', t, mesh, list(placements))
