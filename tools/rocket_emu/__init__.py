"""The emulated Orange Pi 5 Plus: QEMU with the RK3588 NPU model, Debian's arm64 kernel and
this project's rocket-dkms, Debian's Teflon and npuctl (emulation/rk3588.yaml)."""
