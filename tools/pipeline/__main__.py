"""Command line of the build pipeline; the Makefile targets call it."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from . import fetch
from .config import DEFAULT_PACKAGE, config_path, load_config, package_names
from .errors import BuildError, ExitCode


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pipeline", description=__doc__)
    parser.add_argument(
        "--package", default=DEFAULT_PACKAGE, help="the driver package (a dkms/<name>.yaml)"
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
    version = commands.add_parser("version", help="print the Debian version")
    version.add_argument("--upstream", action="store_true", help="print the DKMS version")
    return parser


def _fetch(config_path: Path) -> Path:
    config = load_config(config_path)
    tarball = os.environ.get("UPSTREAM_TARBALL") or None
    return fetch.fetch_upstream(
        config,
        git_source=os.environ.get("UPSTREAM_GIT") or None,
        tarball=Path(tarball) if tarball else None,
    )


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "packages":
            print("\n".join(package_names()))
            return ExitCode.OK
        if args.command == "npuctl-drivers":
            from . import npuctl_drivers

            if args.check:
                npuctl_drivers.check()
            else:
                print(npuctl_drivers.write())
            return ExitCode.OK
        if args.config is None:
            args.config = config_path(args.package)
        config = load_config(args.config)
        if args.command == "fetch":
            print(_fetch(args.config))
        elif args.command == "upstream-path":
            tree = fetch.find_upstream(config)
            if tree is None:
                print("upstream tree not in the cache: run 'make fetch'", file=sys.stderr)
                return ExitCode.UPSTREAM
            print(tree)
        elif args.command == "repo":
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
        elif args.command == "test-suite":
            print(config.kernel_test_suite)
        elif args.command == "version":
            print(config.version if args.upstream else config.debian_version)
        elif args.command == "patch":
            from .patching import patched_copy

            print(patched_copy(_fetch(args.config), args.destination, config.patches_dir))
        elif args.command == "render":
            from .render import write_dkms_conf

            write_dkms_conf(config, args.destination)
        elif args.command == "source-tree":
            from .package import source_tree

            if args.version_suffix:
                config = config.with_local_suffix(args.version_suffix)
            print(source_tree(config, _fetch(args.config), args.build_dir))
        elif args.command == "npuctl-deb":
            from .npuctl_package import build_npuctl_package

            if args.version_suffix:
                config = config.with_local_suffix(args.version_suffix)
            for artifact in build_npuctl_package(
                config, args.build_dir, args.dist, lintian=not args.no_lintian
            ):
                print(artifact)
        elif args.command == "deb":
            from .package import build_packages

            if args.version_suffix:
                config = config.with_local_suffix(args.version_suffix)
            for artifact in build_packages(
                config,
                _fetch(args.config),
                args.build_dir,
                args.dist,
                lintian=not args.no_lintian,
            ):
                print(artifact)
    except BuildError as error:
        print(f"pipeline: error: {error}", file=sys.stderr)
        return error.code
    except KeyboardInterrupt:
        print("pipeline: interrupted", file=sys.stderr)
        return 130
    return ExitCode.OK


if __name__ == "__main__":
    sys.exit(main())
