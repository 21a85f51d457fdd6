"""Load a driver's description and derive every value the templates, the pipeline, the kernel
lab and npuctl use. Each driver is described once, in dkms/<name>.yaml (upstream source and
pin, kernel gate, device, firmware ids, the board files its package ships, how the lab makes
it probe); its quilt series is patches/<name>/ and its board files provision/<name>/. What
belongs to the board rather than to one driver (firmware ids, device node, board files, the
lab's firmware tables) may instead be described once in dkms/socs/<soc>.yaml, named by the
description's "soc", and its board files are then provision/<soc>/: two drivers for the same
NPU share it. The templates (dkms/dkms.conf.j2, debian/dkms/) and the code here serve every
one of them."""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from . import identity, schema
from .errors import BuildError, ExitCode

REPO_ROOT = Path(__file__).resolve().parents[2]
DKMS_DIR = REPO_ROOT / "dkms"  # one <package>.yaml per driver package, dkms.conf.j2
SOCS_DIR = DKMS_DIR / "socs"  # <soc>.yaml: what every driver of one board's NPU shares
PATCHES_ROOT = REPO_ROOT / "patches"  # <package>/: a quilt series
PROVISION_DIR = REPO_ROOT / "provision"  # board-side files: <package>/ and npuctl's
# The guarded first load every driver package ships (provision/module-trial/, rendered with
# the package's description; docs/drivers.md, "The first load is a trial").
MODULE_TRIAL_DIR = PROVISION_DIR / "module-trial"
MODULE_TRIAL_FILES = (
    {"file": "module-trial.j2", "to": "usr/libexec/{package}", "name": "module-trial"},
    {"file": "module-trial.conf.j2", "to": "usr/lib/modprobe.d", "name": "{package}-trial.conf"},
)
DEBIAN_TEMPLATES = REPO_ROOT / "debian" / "dkms"  # debian/ of every driver package
METAINFO_TEMPLATE = REPO_ROOT / "debian" / "dkms-metainfo.xml.j2"  # its AppStream metadata
DEBIAN_MIRROR = "http://deb.debian.org/debian"


def debian_mirror() -> str:
    """The Debian archive to download from: DEBIAN_MIRROR names another one."""
    return (os.environ.get("DEBIAN_MIRROR") or DEBIAN_MIRROR).rstrip("/")


PACKAGE_SCHEMA = DKMS_DIR / "package.schema.json"  # what a description may hold

_KERNEL_VERSION = re.compile(r"^(\d+)\.(\d+)$")


@dataclass(frozen=True)
class Upstream:
    """Where the driver's source comes from and the pin that verifies it.

    ``git``: a subtree of a repository at a commit. ``debian-source``: paths out of a
    Debian source package's orig tarball (pinned by sha256), kept at their paths.
    Either way the tree is verified by its git tree id, whichever copy it came from.
    """

    kind: str  # git | debian-source
    repository: str  # the git URL, or the Debian pool folder the tarball is in
    commit: str  # git only
    date: str  # YYYYMMDD: the commit's, or the source release's
    paths: tuple[str, ...]  # git: (subtree,); debian-source: paths inside the source
    tree_id: str
    license: str
    uapi_headers: tuple[str, ...] = ()  # GPL-2 with the Linux-syscall-note exception
    source_package: str = ""
    source_version: str = ""
    source_file: str = ""
    source_sha256: str = ""

    @property
    def subtree(self) -> str:
        return self.paths[0]

    @property
    def commit_date(self) -> str:
        return self.date

    @property
    def source_url(self) -> str:
        return f"{self.repository}/{self.source_file}"

    @property
    def description(self) -> str:
        """One phrase naming the pinned source, for debian/copyright and the changelog."""
        if self.kind == "git":
            return f"{self.subtree} of {_web(self.repository)} at commit {self.commit}"
        return (
            f"{', '.join(self.paths)} of Debian's {self.source_package} {self.source_version} "
            f"source ({self.source_file}, sha256 {self.source_sha256})"
        )


@dataclass(frozen=True)
class BoardFile:
    """A file of provision/<package>/ the driver package installs on every board."""

    source: Path  # provision/<package or soc>/<file>; a .j2 is rendered
    directory: str  # where it goes, without the leading slash ("usr/lib/udev/rules.d")
    installed_name: str = ""  # the file's name on the board, when not the source's

    @property
    def name(self) -> str:
        return self.installed_name or self.source.name.removesuffix(".j2")

    @property
    def installed_path(self) -> str:
        return f"/{self.directory}/{self.name}"


@dataclass(frozen=True)
class AcpiVariant:
    """One SSDT the NPU is described by in a UEFI boot, and what the kernel log must say."""

    name: str
    title: str
    values: dict[str, object]  # the table's variables, the defaults filled in
    expect: str


@dataclass(frozen=True)
class AcpiBoots:
    table: str  # Jinja ASL, rendered once per variant
    variants: tuple[AcpiVariant, ...]


@dataclass(frozen=True)
class Lab:
    """How the kernel lab makes the module probe in QEMU."""

    device_tree_node: str  # added to QEMU's own device tree
    probe_evidence: str  # text in the kernel log once the probe has run
    acpi: AcpiBoots | None  # UEFI boots with ACPI descriptions of the NPU too, where given
    # Code compiled in only where the kernel exports what it calls: name -> the symbols a
    # module built with it imports.
    optional_code: dict[str, tuple[str, ...]]
    # Simulated distribution kernel -> "build", "build with <optional code>" or the reasons
    # DKMS skips it.
    distribution_kernels: dict[str, str | tuple[str, ...]]
    # Code built only where the kernel's own headers have the layout it was written for:
    # name -> (the symbols a module built with it imports, a kernel header, the text in that
    # header that leaves it out).
    layout_gated_code: dict[str, tuple[tuple[str, ...], str, str]] = field(
        default_factory=dict, hash=False
    )


def _acpi_boots(data: dict[str, Any] | None) -> AcpiBoots | None:
    if data is None:
        return None
    return AcpiBoots(
        table=data["table"],
        variants=tuple(
            AcpiVariant(
                name=variant["name"],
                title=variant["title"],
                values={**data["defaults"], **variant.get("values", {})},
                expect=variant.get("expect", data["expect"]),
            )
            for variant in data["variants"]
        ),
    )


def _web(repository: str) -> str:
    return repository.removesuffix(".git")


@dataclass(frozen=True)
class Library:
    """A user-mode library built from the same upstream commit, packaged on its own."""

    source: str  # its source package (libaipudrv)
    package: str  # the binary package (libaipudrv6)
    dev_package: str  # the headers and the link (libaipudrv-dev)
    headers: tuple[str, ...]  # in the subtree, for the -dev package
    include_subdir: str  # /usr/include/<this>
    version: str  # the library's own version (6.1.0)
    soname: str  # libaipudrv.so.6
    subtree: str  # of the upstream repository, at the description's commit
    tree_id: str
    license: str
    license_file: str  # in the subtree
    summary: str
    description: str  # Jinja, rendered with the description's values
    make_directory: str  # in the subtree
    make_target: str
    make_variables: dict[str, str]  # {objects}, {output}, {soname}, {file_name} filled in
    bundled: tuple[dict[str, str], ...] = ()  # others' code compiled in: files, copyright, license

    @property
    def file_name(self) -> str:
        """libaipudrv.so.6.1.0: the soname's stem and the whole version."""
        return f"{self.soname.rsplit('.so.', 1)[0]}.so.{self.version}"

    @property
    def link_name(self) -> str:
        """libaipudrv.so: what a program is linked with (-laipudrv)."""
        return f"{self.soname.rsplit('.so.', 1)[0]}.so"

    @property
    def pkgconfig_name(self) -> str:
        return self.soname.rsplit(".so.", 1)[0]


@dataclass(frozen=True)
class UserSpaceBuild:
    """A family's wanted user-space build: the suite of the project's repository that
    carries it and its .debs (each its pool file and sha256), as described in a file."""

    suite: str
    debs: list[dict[str, str]]
    described_in: str


@dataclass(frozen=True)
class Config:
    name: str
    module: str
    platform_driver: str  # /sys/bus/platform/drivers/<name>
    npuctl_platform: str  # npuctl's platform package for this NPU
    # How npuctl's package descriptions name this NPU: {npu, board, models}.
    npuctl_description: dict[str, object]
    npuctl_requires: tuple[str, ...]  # PyPI requirements: npuctl's extra of the platform's name
    upstream_version: str
    debian_revision: str
    maintainer: str
    homepage: str
    project_homepage: str
    summary: str
    description: str  # a Jinja template, rendered with the template context
    changelog_entry: str  # likewise
    # Packages building the same module that installing this one removes, each as a Debian
    # relation ("sky1-npu-dkms", "cix-npu-driver (<< 2~)"): Conflicts and Replaces.
    takes_over_relations: tuple[str, ...]
    # The package of the same family this one is an alternative driver line to ("" for none):
    # npuctl speaks of that one unless this one is installed.
    alternative_to: str
    changelog_date: str
    changelog_distribution: str
    upstream: Upstream
    kernel_min: str
    kernel_tested_max: str
    kernel_config_gate: tuple[str, ...]
    # The name of the kernel's own copy of the driver, when it differs from ``module``.
    kernel_in_tree_module: str
    # The Debian suite whose arm64 kernels the package's autopkgtest builds for: one whose
    # kernel passes the gate.
    kernel_test_suite: str
    install: tuple[str, ...]  # top-level paths of the patched tree that go to /usr/src
    make_arguments: str  # extra arguments of the DKMS make line
    device: dict[str, str]
    acpi_ids: tuple[str, ...]
    compatibles: tuple[str, ...]  # device-tree compatible patterns (fnmatch)
    board_files: tuple[BoardFile, ...]
    lab: Lab
    appstream: dict[str, Any]
    directory: Path
    local_suffix: str = ""  # only for test builds of a "next" version
    # The family's user space as the project carries it: a description (relative to the
    # tree) of the Debian builds it knows, the one a board should have ("wanted") and the
    # suite of the project's apt repository that carries it ("repository_suite").
    user_space: Path | None = None
    library: Library | None = None  # a user-mode library built from the same commit

    def wanted_user_space(self) -> UserSpaceBuild | None:
        """The build of the family's user space it wants; None without a user space."""
        if self.user_space is None:
            return None
        document = yaml.safe_load(self.user_space.read_text(encoding="utf-8"))
        build = next(b for b in document["builds"] if b["version"] == document["wanted"])
        return UserSpaceBuild(
            str(document["repository_suite"]), build["debs"], self.user_space.name
        )

    @property
    def patches_dir(self) -> Path:
        """patches/<package>/ of the tree the description is in."""
        return self.directory.parent / PATCHES_ROOT.name / self.name

    @property
    def takes_over(self) -> tuple[str, ...]:
        """The names of the packages it takes over, without their version bounds."""
        return tuple(relation.split()[0] for relation in self.takes_over_relations)

    @property
    def modaliases(self) -> tuple[str, ...]:
        """The firmware ids as udev modalias patterns (AppStream's provides)."""
        acpi = tuple(f"acpi*:{acpi_id}:*" for acpi_id in self.acpi_ids)
        device_tree = tuple(
            f"of:N*T*C{pattern}" + ("" if pattern.endswith("*") else "*")
            for pattern in self.compatibles
        )
        return acpi + device_tree

    @property
    def appstream_id(self) -> str:
        """The AppStream component id; the metainfo file must be named after it. Packages
        of one module that replace each other describe different drivers: the family's
        first package keeps the module's name (an id never changes once published), another
        driver line is named by its package (aipu-compass-dkms: ...aipu_compass)."""
        if not self.alternative_to:
            return f"{identity.APPSTREAM_PREFIX}.{self.module}"
        line = self.name.removesuffix("-dkms").replace("-", "_")
        return f"{identity.APPSTREAM_PREFIX}.{line}"

    @property
    def version(self) -> str:
        """Upstream part of the Debian version: the driver's version, plus the snapshot of
        a git source."""
        snapshot = (
            f"+git{self.upstream.date}.{self.upstream.commit[:7]}"
            if self.upstream.kind == "git"
            else ""
        )
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


def package_names() -> list[str]:
    """Every driver package: a description dkms/<name>.yaml."""
    return sorted(path.stem for path in DKMS_DIR.glob("*.yaml"))


def config_path(name: str) -> Path:
    path = DKMS_DIR / f"{name}.yaml"
    if not path.is_file():
        raise BuildError(
            f"no driver package {name!r}: known are {', '.join(package_names())}", ExitCode.USAGE
        )
    return path


def load_package(name: str) -> Config:
    return load_config(config_path(name))


def kernel_min_regex(minimum: str) -> str:
    """A regex matching kernel releases >= ``minimum`` ("MAJOR.MINOR").

    dkms 3.0 only knows BUILD_EXCLUSIVE_KERNEL (a regex); BUILD_EXCLUSIVE_KERNEL_MIN came in
    dkms 3.1, so a regex is the one gate every supported dkms understands.
    """
    match = _KERNEL_VERSION.match(minimum)
    if not match:
        raise BuildError(
            f"kernel.min {minimum!r} is not MAJOR.MINOR: fix dkms/<package>.yaml", ExitCode.USAGE
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


def _at(data: dict[str, Any], path: str) -> Any:
    """The value at a dotted path of a description its schema has passed."""
    node: Any = data
    for key in path.split("."):
        node = node[key]
    return node


def _upstream(data: dict[str, Any]) -> Upstream:
    def text(key: str) -> str:
        return str(_at(data, f"upstream.{key}"))

    section = data["upstream"]
    uapi = tuple(str(item) for item in section.get("uapi_headers", []))
    if "debian_source" in section:
        source_file = text("debian_source.file")
        package = text("debian_source.package")
        upstream = Upstream(
            kind="debian-source",
            repository=f"{DEBIAN_MIRROR}/pool/main/{package[0]}/{package}",
            commit="",
            date=text("debian_source.date"),
            paths=tuple(str(item).strip("/") for item in section["paths"]),
            tree_id=text("tree_id"),
            license=text("license"),
            uapi_headers=uapi,
            source_package=package,
            source_version=text("debian_source.version"),
            source_file=source_file,
            source_sha256=text("debian_source.sha256"),
        )
    else:
        upstream = Upstream(
            kind="git",
            repository=text("repository"),
            commit=text("commit"),
            date=text("commit_date"),
            paths=(text("subtree").strip("/"),),
            tree_id=text("tree_id"),
            license=text("license"),
            uapi_headers=uapi,
        )
    return upstream


def _board_file(package: str, item: dict[str, Any], path: Path) -> BoardFile:
    """provision/<package>/ (or provision/<soc>/) of the tree the description is in; a soc's
    file is installed under the name its "name" gives, {package} being the package's."""
    tree = path.resolve().parent.parent
    folder = item.get("folder") or item.get("soc", package)
    source = tree / PROVISION_DIR.name / str(folder) / str(item["file"])
    if not source.is_file():
        raise BuildError(
            f"{path}: board file {source.relative_to(tree)} does not exist", ExitCode.USAGE
        )
    name = str(item.get("name", "")).replace("{package}", package)
    return BoardFile(source, str(item["to"]).replace("{package}", package).strip("/"), name)


def with_soc(data: Any, path: Path) -> Any:
    """The description with what its soc describes filled in: a section the description
    lacks comes from the soc; of "package" and "lab", the soc's settings updated by its own."""
    if not isinstance(data, dict) or "soc" not in data:
        return data
    soc_path = path.resolve().parent / SOCS_DIR.name / f"{data['soc']}.yaml"
    try:
        soc = yaml.safe_load(soc_path.read_text(encoding="utf-8"))
    except OSError as error:
        raise BuildError(
            f"{path}: soc {data['soc']!r}: {error.strerror}", ExitCode.USAGE
        ) from error
    except yaml.YAMLError as error:
        raise BuildError(f"{soc_path} is not valid YAML: {error}", ExitCode.USAGE) from error
    merged = {key: value for key, value in data.items() if key != "soc"}
    for key, value in soc.items():
        if key == "board_files":
            value = [{**item, "soc": data["soc"]} for item in value]
        if key not in merged:
            merged[key] = value
        elif key in ("package", "lab"):
            merged[key] = {**value, **merged[key]}
    return merged


def load_config(path: Path) -> Config:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise BuildError(f"cannot read {path}: {error.strerror}", ExitCode.USAGE) from error
    except yaml.YAMLError as error:
        raise BuildError(f"{path} is not valid YAML: {error}", ExitCode.USAGE) from error
    data = with_soc(data, path)
    problem = schema.problem(data, PACKAGE_SCHEMA)
    if problem:
        raise BuildError(f"{path}: {problem}", ExitCode.USAGE)

    def text(key: str) -> str:
        return str(_at(data, key))

    name = text("package.name")
    lab = data["lab"]
    config = Config(
        name=name,
        module=text("package.module"),
        platform_driver=text("package.platform_driver"),
        npuctl_platform=text("package.npuctl_platform"),
        npuctl_description=dict(data["package"]["npuctl_description"]),
        npuctl_requires=tuple(data["package"].get("npuctl_requires", ())),
        upstream_version=text("package.upstream_version"),
        debian_revision=text("package.debian_revision"),
        maintainer=text("package.maintainer"),
        homepage=text("package.homepage"),
        project_homepage=text("package.project_homepage"),
        summary=text("package.summary"),
        description=" ".join(text("package.description").split()),
        changelog_entry=" ".join(text("package.changelog.entry").split()),
        takes_over_relations=tuple(data["package"]["takes_over"]),
        alternative_to=str(data["package"].get("alternative_to", "")),
        changelog_date=text("package.changelog.date"),
        changelog_distribution=text("package.changelog.distribution"),
        upstream=_upstream(data),
        kernel_min=text("kernel.min"),
        kernel_tested_max=text("kernel.tested_max"),
        kernel_config_gate=tuple(data["kernel"]["config_gate"]),
        kernel_in_tree_module=str(
            data.get("kernel", {}).get("in_tree_module") or text("package.module")
        ),
        kernel_test_suite=str(data.get("kernel", {}).get("test_suite", "trixie")),
        install=tuple(data["dkms"]["install"]),
        make_arguments=str(data.get("dkms", {}).get("make_arguments", "")),
        device=dict(data["device"]),
        acpi_ids=tuple(data["firmware"]["acpi_ids"]),
        compatibles=tuple(data["firmware"]["compatibles"]),
        board_files=tuple(
            _board_file(name, item, path)
            for item in [
                *data["board_files"],
                *({**item, "folder": MODULE_TRIAL_DIR.name} for item in MODULE_TRIAL_FILES),
            ]
        ),
        lab=Lab(
            device_tree_node=text("lab.device_tree_node"),
            probe_evidence=text("lab.probe_evidence"),
            acpi=_acpi_boots(lab.get("acpi")),
            optional_code={
                name: tuple(symbols) for name, symbols in lab.get("optional_code", {}).items()
            },
            distribution_kernels={
                name: expected if isinstance(expected, str) else tuple(expected)
                for name, expected in lab.get("distribution_kernels", {}).items()
            },
            layout_gated_code={
                name: (tuple(gate["symbols"]), gate["header"], gate["absent_when"])
                for name, gate in lab.get("layout_gated_code", {}).items()
            },
        ),
        appstream=dict(data["appstream"]),
        user_space=(
            path.parent.parent / data["package"]["user_space"]
            if data["package"].get("user_space")
            else None
        ),
        library=_library(data.get("library")),
        directory=path.resolve().parent,
    )
    return config


def _library(data: dict[str, Any] | None) -> Library | None:
    if not data:
        return None
    make = data["make"]
    return Library(
        source=str(data["source"]),
        package=str(data["package"]),
        dev_package=str(data["dev_package"]),
        headers=tuple(str(header) for header in data["headers"]),
        include_subdir=str(data["include_subdir"]),
        version=str(data["version"]),
        soname=str(data["soname"]),
        subtree=str(data["subtree"]).strip("/"),
        tree_id=str(data["tree_id"]),
        license=str(data["license"]),
        license_file=str(data["license_file"]),
        summary=str(data["summary"]),
        description=" ".join(str(data["description"]).split()),
        make_directory=str(make["directory"]),
        make_target=str(make["target"]),
        make_variables={str(k): str(v) for k, v in make.get("variables", {}).items()},
        bundled=tuple(dict(item) for item in data.get("bundled", ())),
    )
