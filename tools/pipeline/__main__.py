"""Command line of the build pipeline; the Makefile targets call it."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from . import fetch, sources
from .config import Config, config_path, load_config, package_names
from .errors import BuildError, ExitCode


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pipeline", description=__doc__)
    parser.add_argument(
        "--package",
        default=package_names()[0],
        help="the driver package (a dkms/<name>.yaml; default: the first by name)",
    )
    parser.add_argument(
        "--config", type=Path, help="a driver description, dkms/<name>.yaml (not --package)"
    )
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("packages", help="list the driver packages")
    drivers = commands.add_parser(
        "npuctl-drivers", help="write npuctl's drivers.json from dkms/*.yaml"
    )
    drivers.add_argument("--check", action="store_true", help="only fail if it is out of date")
    commands.add_parser("fetch", help="get, verify and cache the upstream driver subtree")
    commands.add_parser("upstream-path", help="print the cached upstream tree, if verified")
    patched = commands.add_parser("patch", help="write upstream + patches/ to a folder")
    patched.add_argument("destination", type=Path)
    render = commands.add_parser("render", help="render dkms.conf into a file")
    render.add_argument("destination", type=Path)
    source = commands.add_parser("source-tree", help="write the Debian source tree")
    source.add_argument("build_dir", type=Path)
    source.add_argument("--version-suffix", help="build <version>+SUFFIX (upgrade tests)")
    deb = commands.add_parser("deb", help="build the Debian source and binary packages")
    deb.add_argument("--build-dir", type=Path, required=True)
    deb.add_argument("--dist", type=Path, required=True)
    deb.add_argument("--version-suffix", help="build <version>+SUFFIX (upgrade tests)")
    deb.add_argument("--no-lintian", action="store_true")
    npuctl_deb = commands.add_parser(
        "npuctl-deb", help="build the npuctl Debian packages (npuctl, npuctl-serve, npuctl-watch)"
    )
    npuctl_deb.add_argument("--build-dir", type=Path, required=True)
    npuctl_deb.add_argument("--dist", type=Path, required=True)
    npuctl_deb.add_argument("--no-lintian", action="store_true")
    npuctl_deb.add_argument("--version-suffix", help="build <version>+SUFFIX (upgrade tests)")
    repo = commands.add_parser("repo", help="build the signed apt repository from --dist")
    repo.add_argument("--dist", type=Path, default=Path("dist"))
    repo.add_argument("--repo", type=Path, default=Path("dist/repo"))
    repo.add_argument("--work", type=Path, default=Path("build/repo"))
    key = repo.add_mutually_exclusive_group()
    key.add_argument("--key", type=Path, help="an exported OpenPGP secret key file")
    key.add_argument("--gnupg-home", type=Path, help="a GnuPG home with the secret key")
    commands.add_parser(
        "test-suite", help="print the Debian suite whose arm64 kernels the autopkgtest uses"
    )
    commands.add_parser(
        "library-source", help="print the source package of the package's library, if any"
    )
    version = commands.add_parser("version", help="print the Debian version")
    version.add_argument("--upstream", action="store_true", help="print the DKMS version")
    return parser


def _fetch(config: Config) -> Path:
    given_tarball = sources.tarball(config.name)
    given_git = sources.git_source(config.name)
    return fetch.fetch_upstream(
        config,
        git_source=given_git[1] if given_git else None,
        tarball=given_tarball[1] if given_tarball else None,
        source_variable=(given_tarball or given_git or ("UPSTREAM_GIT", ""))[0],
    )


def _library_git_source(config: Config) -> str | None:
    given = sources.git_source(config.name)
    return given[1] if given else None


def _packages(args: argparse.Namespace) -> int:
    print("\n".join(package_names()))
    return ExitCode.OK


def _npuctl_drivers(args: argparse.Namespace) -> int:
    from . import npuctl_drivers

    if args.check:
        npuctl_drivers.check()
    else:
        print(npuctl_drivers.write())
    return ExitCode.OK


def _described(args: argparse.Namespace) -> Config:
    """The package the command is about, at --version-suffix's version where it has one."""
    config: Config = args.described
    suffix = getattr(args, "version_suffix", None)
    return config.with_local_suffix(suffix) if suffix else config


def _fetch_command(args: argparse.Namespace) -> int:
    print(_fetch(args.described))
    config = _described(args)
    if config.library is not None:  # its own subtree of the same commit
        from .library_package import library_upstream

        print(library_upstream(config, _library_git_source(config)))
    return ExitCode.OK


def _upstream_path(args: argparse.Namespace) -> int:
    tree = fetch.find_upstream(_described(args))
    if tree is None:
        print("upstream tree not in the cache: run 'make fetch'", file=sys.stderr)
        return ExitCode.UPSTREAM
    print(tree)
    return ExitCode.OK


def _repo(args: argparse.Namespace) -> int:
    from .repository import KEYRING_FILE, build_repository

    key = build_repository(
        args.dist.resolve(),
        args.repo.resolve(),
        args.work.resolve(),
        key_file=args.key,
        gnupg_home=args.gnupg_home,
    )
    if key.throwaway:
        print(
            "pipeline: WARNING: signed with a THROWAWAY key made for testing "
            f"({key.fingerprint}); publish only with --key or --gnupg-home",
            file=sys.stderr,
        )
    print(f"{args.repo} signed by {key.fingerprint}; keyring: {args.repo}/{KEYRING_FILE}")
    return ExitCode.OK


def _library_source(args: argparse.Namespace) -> int:
    library = _described(args).library
    if library is not None:
        print(library.source)
    return ExitCode.OK


def _test_suite(args: argparse.Namespace) -> int:
    print(_described(args).kernel_test_suite)
    return ExitCode.OK


def _version(args: argparse.Namespace) -> int:
    config = _described(args)
    print(config.version if args.upstream else config.debian_version)
    return ExitCode.OK


def _patch(args: argparse.Namespace) -> int:
    from .patching import patched_copy

    config = _described(args)
    print(patched_copy(_fetch(args.described), args.destination, config.patches_dir))
    return ExitCode.OK


def _render(args: argparse.Namespace) -> int:
    from .render import write_dkms_conf

    write_dkms_conf(_described(args), args.destination)
    return ExitCode.OK


def _source_tree(args: argparse.Namespace) -> int:
    from .package import source_tree

    print(source_tree(_described(args), _fetch(args.described), args.build_dir))
    return ExitCode.OK


def _npuctl_deb(args: argparse.Namespace) -> int:
    from .npuctl_package import build_npuctl_package

    lintian = not args.no_lintian
    for artifact in build_npuctl_package(
        _described(args), args.build_dir, args.dist, lintian=lintian
    ):
        print(artifact)
    return ExitCode.OK


def _deb(args: argparse.Namespace) -> int:
    from .package import build_packages

    config = _described(args)
    lintian = not args.no_lintian
    upstream = _fetch(args.described)
    for artifact in build_packages(config, upstream, args.build_dir, args.dist, lintian=lintian):
        print(artifact)
    if config.library is not None:
        from .library_package import build_library_package

        for artifact in build_library_package(
            config, args.dist, git_source=_library_git_source(config), lintian=lintian
        ):
            print(artifact)
    return ExitCode.OK


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "packages": _packages,
    "npuctl-drivers": _npuctl_drivers,
    "fetch": _fetch_command,
    "upstream-path": _upstream_path,
    "repo": _repo,
    "test-suite": _test_suite,
    "library-source": _library_source,
    "version": _version,
    "patch": _patch,
    "render": _render,
    "source-tree": _source_tree,
    "npuctl-deb": _npuctl_deb,
    "deb": _deb,
}


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command not in ("packages", "npuctl-drivers"):
            args.config = args.config or config_path(args.package)
            # Read once, before anything else: a broken description is the first thing said.
            args.described = load_config(args.config)
        return COMMANDS[args.command](args)
    except BuildError as error:
        print(f"pipeline: error: {error}", file=sys.stderr)
        return error.code
    except KeyboardInterrupt:
        print("pipeline: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
