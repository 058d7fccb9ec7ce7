class DeviceMesh:
    def __init__(self, device_type, mesh, *, mesh_dim_names=None):
        self.device_type, self.mesh, self.mesh_dim_names = device_type, mesh, mesh_dim_names
