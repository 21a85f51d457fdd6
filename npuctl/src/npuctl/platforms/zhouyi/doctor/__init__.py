"""The Zhouyi doctor: the machine below libnoe (host), then libnoe and the models (npu)."""

from .chain import check
from .host import MODULE, kernel_log

__all__ = ["MODULE", "check", "kernel_log"]
