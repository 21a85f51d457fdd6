"""The Zhouyi doctor: the board (host), the aipu driver's shared checks, then libnoe and the
models (npu), as one declared chain."""

from .chain import check

__all__ = ["check"]
