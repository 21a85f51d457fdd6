"""Debian chroots with real arm64 kernel headers, and QEMU boots of those kernels."""
