"""The aipu kernel driver's own version, asked through its ioctl (AIPU_IOCTL_GET_DRIVER_VERSION
of armchina_aipu.h), without libnoe: the doctor must know which driver answers before any
library talks to it. Run as a child process (a wedged driver can block an ioctl):

python -m npuctl.platforms.zhouyi.kmd DEVICE    prints {"kmd": "5.11.0"} or {"error": "..."}
"""

from __future__ import annotations

import fcntl
import json
import os
import sys

# _IOR('A', 18, char *): read, the size of a pointer, type 'A', number 18.
_IOC_READ = 2
AIPU_IOCTL_GET_DRIVER_VERSION = (_IOC_READ << 30) | (8 << 16) | (ord("A") << 8) | 18
# The driver copies sizeof(KMD_VERSION) bytes, its version string with the NUL.
_BUFFER = 64


def read_kmd_version(device: str) -> str:
    """The version string the driver reports; "" when it was built without one."""
    descriptor = os.open(device, os.O_RDWR | os.O_CLOEXEC)
    try:
        buffer = bytearray(_BUFFER)
        fcntl.ioctl(descriptor, AIPU_IOCTL_GET_DRIVER_VERSION, buffer, True)
    finally:
        os.close(descriptor)
    return buffer.split(b"\0", 1)[0].decode("ascii", "replace").strip()


def main(argv: list[str]) -> int:
    try:
        answer: dict[str, str] = {"kmd": read_kmd_version(argv[0])}
    except OSError as error:
        answer = {"error": f"{argv[0]}: {error.strerror or error}"}
    print(json.dumps(answer))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
