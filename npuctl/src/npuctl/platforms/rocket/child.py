"""What npuctl and its child-process probe of the vendor code (probe.py) agree on: the
probe's module and the words of Teflon it looks for. Standard library only, like the probe."""

from __future__ import annotations

MODULE = "npuctl.platforms.rocket.probe"  # run as python -m MODULE
NO_DEVICE = "Couldn't open kernel device"  # Teflon's only word, on stderr, when it finds none
LOADED = "loaded rocket driver"
