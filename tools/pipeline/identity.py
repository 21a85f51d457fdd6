"""The project's own name, which is its first driver package's (the project began as one
package). It is spelled here once, so that no other code names a family; the family-name
lint (python -m pipeline.family_lint) exempts this file alone."""

from __future__ import annotations

NAME = "aipu-dkms"
MAINTAINERS = f"{NAME} maintainers <{NAME}@example.org>"
# The download cache: $AIPU_CACHE, else $XDG_CACHE_HOME/aipu-dkms.
CACHE_VARIABLE = "AIPU_CACHE"
# The apt repository's origin and the package of its signing key.
KEYRING_PACKAGE = "aipu-archive-keyring"
# The reverse-DNS prefix of the packages' AppStream component ids.
APPSTREAM_PREFIX = "io.github.aipu_dkms"
