#!/bin/bash
# Run a command as a user without root: as root, as 'nobody' with a scratch HOME and TMPDIR
# of its own (what a contributor's account is); as anyone else, as that user.
set -euo pipefail

if [ "$(id -u)" -ne 0 ]; then
    exec "$@"
fi
scratch=$(mktemp -d "${TMPDIR:-/tmp}/unprivileged.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
chown nobody "$scratch"
setpriv --reuid=nobody --regid=nogroup --clear-groups \
    env HOME="$scratch" TMPDIR="$scratch" "$@"
