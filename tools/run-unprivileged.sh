#!/bin/bash
# Run a command without root's privileges. As root: in a new user namespace, where the
# process keeps its files (the checkout may sit in a folder only root can enter) but has no
# capabilities on the machine: no mknod, no chown, and an effective uid that is not 0. As
# anyone else: as that user.
set -euo pipefail

if [ "$(id -u)" -ne 0 ]; then
    exec "$@"
fi
exec unshare --user -- "$@"
