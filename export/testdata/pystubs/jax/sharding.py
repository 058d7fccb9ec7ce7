class Mesh:
    def __init__(self, devices, axis_names):
        self.devices, self.axis_names = devices, tuple(axis_names)


class PartitionSpec(tuple):
    def __new__(cls, *parts):
        return tuple.__new__(cls, parts)


class NamedSharding:
    def __init__(self, mesh, spec):
        if not isinstance(mesh, Mesh) or not isinstance(spec, PartitionSpec):
            raise TypeError('NamedSharding(Mesh, PartitionSpec)')
        self.mesh, self.spec = mesh, spec
