"""Load aipu.yaml and derive every value the templates and the pipeline use."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from .errors import BuildError, ExitCode

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_CONFIG = REPO_ROOT / "aipu.yaml"

_SHA1 = re.compile(r"^[0-9a-f]{40}$")
_KERNEL_VERSION = re.compile(r"^(\d+)\.(\d+)$")


@dataclass(frozen=True)
class Upstream:
    repository: str
    commit: str
    commit_date: str
    subtree: str
    tree_id: str
    license: str


@dataclass(frozen=True)
class Config:
    name: str
    module: str
    upstream_version: str
    debian_revision: str
    maintainer: str
    homepage: str
    project_homepage: str
    summary: str
    takes_over: tuple[str, ...]
    changelog_date: str
    changelog_distribution: str
    upstream: Upstream
    kernel_min: str
    kernel_tested_max: str
    kernel_config_gate: str
    device_node: str
    device_group: str
    device_mode: str
    local_suffix: str = ""  # only for test builds of a "next" version

    @property
    def appstream_id(self) -> str:
        """The AppStream component id; the metainfo file must be named after it."""
        return f"io.github.aipu_dkms.{self.module}"

    @property
    def version(self) -> str:
        """Upstream part of the Debian version: the KMD version plus the upstream snapshot."""
        snapshot = f"+git{self.upstream.commit_date}.{self.upstream.commit[:7]}"
        local = f"+{self.local_suffix}" if self.local_suffix else ""
        return f"{self.upstream_version}{snapshot}{local}"

    @property
    def debian_version(self) -> str:
        return f"{self.version}-{self.debian_revision}"

    @property
    def source_dir_name(self) -> str:
        return f"{self.name}-{self.version}"

    @property
    def kernel_regex(self) -> str:
        """dkms BUILD_EXCLUSIVE_KERNEL: every kernel release from kernel_min on."""
        return kernel_min_regex(self.kernel_min)

    def with_local_suffix(self, suffix: str) -> Config:
        """A later version of the same package (``<version>+<suffix>``), to test upgrades."""
        if not re.fullmatch(r"[a-z0-9.]+", suffix):
            raise BuildError(
                f"version suffix {suffix!r} may only hold a-z, 0-9 and dots", ExitCode.USAGE
            )
        return dataclasses.replace(self, local_suffix=suffix)


def kernel_min_regex(minimum: str) -> str:
    """A regex matching kernel releases >= ``minimum`` ("MAJOR.MINOR").

    dkms 3.0 only knows BUILD_EXCLUSIVE_KERNEL (a regex); BUILD_EXCLUSIVE_KERNEL_MIN came in
    dkms 3.1, so a regex is the one gate every supported dkms understands.
    """
    match = _KERNEL_VERSION.match(minimum)
    if not match:
        raise BuildError(
            f"kernel.min {minimum!r} is not MAJOR.MINOR: fix aipu.yaml", ExitCode.USAGE
        )
    major, minor = int(match[1]), int(match[2])
    same_major = rf"{major}\.({_at_least(minor)})([.-]|$)"
    later_major = rf"({_at_least(major + 1)})\."
    return rf"^({same_major}|{later_major})"


def _at_least(number: int) -> str:
    """Regex alternatives for a decimal integer >= number (no leading zeros)."""
    digits = str(number)
    width = len(digits)
    alternatives = [rf"[1-9][0-9]{{{width},}}"]  # more digits than number
    for position, digit in enumerate(digits):
        prefix = digits[:position]
        rest = width - position - 1
        last = position == width - 1
        low = int(digit) if last else int(digit) + 1
        if low <= 9:
            tail = f"[0-9]{{{rest}}}" if rest else ""
            alternatives.append(f"{prefix}[{low}-9]{tail}")
    return "|".join(alternatives)


def _require(data: dict[str, Any], path: str) -> Any:
    node: Any = data
    for key in path.split("."):
        if not isinstance(node, dict) or key not in node:
            raise BuildError(f"aipu.yaml: missing key {path!r}: add it", ExitCode.USAGE)
        node = node[key]
    return node


def load_config(path: Path = DEFAULT_CONFIG) -> Config:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise BuildError(f"cannot read {path}: {error.strerror}", ExitCode.USAGE) from error
    except yaml.YAMLError as error:
        raise BuildError(f"{path} is not valid YAML: {error}", ExitCode.USAGE) from error
    if not isinstance(data, dict):
        raise BuildError(f"{path} must be a mapping", ExitCode.USAGE)

    def text(key: str) -> str:
        return str(_require(data, key))

    upstream = Upstream(
        repository=text("upstream.repository"),
        commit=text("upstream.commit"),
        commit_date=text("upstream.commit_date"),
        subtree=text("upstream.subtree").strip("/"),
        tree_id=text("upstream.tree_id"),
        license=text("upstream.license"),
    )
    for key, value in (("commit", upstream.commit), ("tree_id", upstream.tree_id)):
        if not _SHA1.match(value):
            raise BuildError(
                f"aipu.yaml: upstream.{key} must be 40 lowercase hex digits", ExitCode.USAGE
            )
    config = Config(
        name=text("package.name"),
        module=text("package.module"),
        upstream_version=text("package.upstream_version"),
        debian_revision=text("package.debian_revision"),
        maintainer=text("package.maintainer"),
        homepage=text("package.homepage"),
        project_homepage=text("package.project_homepage"),
        summary=text("package.summary"),
        takes_over=tuple(_require(data, "package.takes_over")),
        changelog_date=text("package.changelog.date"),
        changelog_distribution=text("package.changelog.distribution"),
        upstream=upstream,
        kernel_min=text("kernel.min"),
        kernel_tested_max=text("kernel.tested_max"),
        kernel_config_gate=text("kernel.config_gate"),
        device_node=text("device.node"),
        device_group=text("device.group"),
        device_mode=text("device.mode"),
    )
    kernel_min_regex(config.kernel_min)  # validates the format early
    return config
