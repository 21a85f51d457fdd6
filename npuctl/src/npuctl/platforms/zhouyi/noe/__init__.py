"""The libnoe binding: the only package that knows about ctypes."""
