"""npuctl: prove the Zhouyi NPU really computes, and say what is wrong when it does not."""

__version__ = "0.2.0"
