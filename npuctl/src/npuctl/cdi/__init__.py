"""Container Device Interface specs for the NPU (podman, containerd 2.x, CRI-O, Docker 27+,
Kubernetes DRA read them). Knows no NPU family: a platform says which device nodes, files and
environment its NPU needs (``Platform.cdi``)."""
