"""systemd's notify protocol (sd_notify(3)): READY=1 after warm-up, STOPPING=1 on SIGTERM and
WATCHDOG=1 while the NPU answers. Without NOTIFY_SOCKET (not run by systemd) it does nothing."""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable


def notify(state: str) -> bool:
    address = os.environ.get("NOTIFY_SOCKET")
    if not address:
        return False
    if address.startswith("@"):  # an abstract socket
        address = "\0" + address[1:]
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
        try:
            sock.connect(address)
            sock.sendall(state.encode())
        except OSError:
            return False
    return True


def watchdog_interval() -> float | None:
    """Half of WatchdogSec, when systemd asks this very process for pings."""
    usec = os.environ.get("WATCHDOG_USEC")
    pid = os.environ.get("WATCHDOG_PID")
    if not usec or (pid and pid != str(os.getpid())):
        return None
    try:
        return int(usec) / 2_000_000
    except ValueError:
        return None


def start_watchdog(healthy: Callable[[], bool], stop: threading.Event) -> None:
    """Ping while ``healthy()``; a hung NPU call stops the pings and systemd restarts us."""
    interval = watchdog_interval()
    if interval is None:
        return

    def ping() -> None:
        while not stop.wait(interval):
            if healthy():
                notify("WATCHDOG=1")

    threading.Thread(target=ping, name="watchdog", daemon=True).start()
