"""npuctl doctor: diagnose the whole NPU stack, one finding per check, a fix for each."""
