#!/usr/bin/env bash
# Prepares a quilt working tree over a copy of the verified upstream tree, with the whole
# series applied, for editing or adding patches.
# Usage: quilt-tree.sh UPSTREAM_TREE DEST PATCHES_DIR
set -euo pipefail

upstream=$1
destination=$2
patches=$(cd "$3" && pwd)
repo=$(cd "$(dirname "$0")/.." && pwd)

rm -rf "$destination"
mkdir -p "$(dirname "$destination")"
cp -a "$upstream" "$destination"
cd "$destination"
export QUILT_PATCHES="$patches"
if [ -s "$patches/series" ]; then
	quilt --quiltrc "$repo/tools/quiltrc" push -a -q --fuzz=0 >/dev/null
fi

cat <<EOT
Quilt tree ready in $destination, all patches applied. To work on it:
  cd $destination
  export QUILT_PATCHES=$patches
  alias quilt='quilt --quiltrc $repo/tools/quiltrc'
  quilt new NNNN-topic.patch; quilt edit FILE; quilt refresh; quilt header -e
EOT
