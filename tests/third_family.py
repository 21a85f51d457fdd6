"""A third NPU family, invented for the tests: a scratch copy of the tree with the family
added in its own places only (its description in dkms/, one patch, one board file in
provision/, an npuctl platform package and its serving adapter), and its upstream as a git
repository. tests/test_third_family.py shows the tree's machinery taking it in;
tests/test_kernel_lifecycle.py builds and boots it beside the real families."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

from .conftest import run

ROOT = Path(__file__).resolve().parents[1]
PACKAGE, MODULE, FAMILY = "demo-dkms", "demo", "demo"
COMPATIBLE = "example,demo-npu"
SCRATCH_IGNORED = shutil.ignore_patterns(
    ".git", ".venv*", "build", "dist", "__pycache__", "*.egg-info", ".pytest_cache"
)

MODULE_SOURCE = """\
// SPDX-License-Identifier: GPL-2.0-only
/*
 * A platform driver that only says it probed: the invented NPU of the third family.
 * Copyright (C) 2026 The demo authors
 */
#include <linux/mod_devicetable.h>
#include <linux/module.h>
#include <linux/platform_device.h>

static int demo_probe(struct platform_device *pdev)
{
	dev_info(&pdev->dev, "demo npu probed\\n");
	return 0;
}

static const struct of_device_id demo_of_match[] = {
	{ .compatible = "example,demo-npu" },
	{ }
};
MODULE_DEVICE_TABLE(of, demo_of_match);

static struct platform_driver demo_driver = {
	.probe = demo_probe,
	.driver = {
		.name = "demo",
		.of_match_table = demo_of_match,
	},
};
module_platform_driver(demo_driver);

MODULE_DESCRIPTION("Demo NPU");
MODULE_LICENSE("GPL");
"""

PATCH = """\
Description: Build the driver out of tree, with its version in modinfo
 A Kbuild at the top of the DKMS source tree builds demo.ko; DEMO_MODULE_VERSION is the
 DKMS package's version, so modinfo tells which build is installed.
Author: demo maintainers <demo@example.org>
Origin: other
Forwarded: not-needed
Last-Update: 2026-11-26

--- /dev/null
+++ b/Kbuild
@@ -0,0 +1,3 @@
+obj-m := demo.o
+DEMO_MODULE_VERSION ?= upstream
+ccflags-y += -DDEMO_MODULE_VERSION=\\"$(DEMO_MODULE_VERSION)\\"
--- a/demo.c
+++ b/demo.c
@@ -30,3 +30,4 @@
{blank}
 MODULE_DESCRIPTION("Demo NPU");
 MODULE_LICENSE("GPL");
+MODULE_VERSION(DEMO_MODULE_VERSION);
"""

PATCH = PATCH.replace("{blank}", " ")  # a context line that is empty in the source

PLATFORM = '''\
"""The demo NPU: an invented family, found by its device-tree node."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from npuctl.errors import ExitCode, NpuctlError
from npuctl.platform import BenchRun, Board, Platform

if TYPE_CHECKING:
    from npuctl.cdi.spec import NpuEdits
    from npuctl.doctor.chain import Step
    from npuctl.doctor.findings import Report
    from npuctl.doctor.options import Options
    from npuctl.provision.actions import Action, Request
    from npuctl.system import System

NODE = "/sys/firmware/devicetree/base/npu@1000/compatible"
DEVICE = "/dev/demo"


class Demo(Platform):
    name = "demo"
    title = "Demo NPU (demo board)"
    absent = "no example,demo-npu node in the device tree"
    serves = True
    cdi_kind = "example.org/npu"
    device_paths = (DEVICE,)
    provision_actions = ("group",)

    def locate(self, system: System) -> str | None:
        found = "example,demo-npu" in (system.read(NODE) or "")
        return "device-tree node npu@1000" if found else None

    def check_board(self, system: System, report: Report) -> Board | None:
        where = self.locate(system)
        return Board(where) if where else None

    def check_driver(
        self, system: System, options: Options, report: Report, board: Board
    ) -> list[Step]:
        from npuctl.doctor.chain import Step
        from npuctl.doctor.findings import Finding, Status

        def device() -> bool:
            present = system.stat(DEVICE) is not None
            report.add(
                Finding(
                    "demo.device",
                    "driver",
                    Status.OK if present else Status.FAIL,
                    f"Demo NPU: {DEVICE} " + ("present" if present else "missing"),
                    fix="" if present else "sudo apt install demo-dkms",
                )
            )
            return present

        return [Step("device", "demo.device", "driver", DEVICE, device)]

    def check_user_space(self, system: System, options: Options, report: Report) -> list[Step]:
        return []

    def check_models(self, system: System, options: Options, report: Report) -> list[Step]:
        return []

    def default_provision(self, request: Request) -> list[str]:
        return ["group"]

    def provision(self, name: str, request: Request) -> Action:
        from npuctl.provision.actions import group_action

        return group_action(request.system, request.user, request.group)

    def bench(self, run: BenchRun) -> tuple[Path, dict[str, list[float]]]:
        raise NpuctlError("the demo NPU runs no model", ExitCode.USAGE)

    def cdi_edits(self, system: System, options: dict[str, object]) -> NpuEdits | None:
        from npuctl.cdi.spec import NpuEdits

        return NpuEdits(self.cdi_kind, [(DEVICE, DEVICE)])


PLATFORM = Demo()
'''

ADAPTER = '''\
"""The demo NPU's adapter to npuctl serve: it serves no model yet."""

from __future__ import annotations

from typing import TYPE_CHECKING

from npuctl.errors import ExitCode, NpuctlError

from . import OpenServing

if TYPE_CHECKING:
    from npuctl.settings import Settings

    from ..models import Serving


def open_serving(settings: Settings, wanted: tuple[str, ...] | None, workers: int) -> Serving:
    raise NpuctlError("the demo NPU serves no model yet", ExitCode.USAGE)


ADAPTER = OpenServing(open_serving)
'''


def _git(repository: Path, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "demo",
        "GIT_AUTHOR_EMAIL": "demo@example.org",
        "GIT_COMMITTER_NAME": "demo",
        "GIT_COMMITTER_EMAIL": "demo@example.org",
        "GIT_AUTHOR_DATE": "2026-11-26T00:00:00Z",
        "GIT_COMMITTER_DATE": "2026-11-26T00:00:00Z",
    }
    result = subprocess.run(
        ["git", "-C", str(repository), *args], capture_output=True, text=True, env=env, check=True
    )
    return result.stdout.strip()


def _upstream(directory: Path) -> tuple[Path, str, str]:
    """The demo driver's upstream: a git repository with the module under driver/."""
    (directory / "driver").mkdir(parents=True)
    (directory / "driver/demo.c").write_text(MODULE_SOURCE)
    _git(directory, "init", "-q")
    _git(directory, "add", ".")
    _git(directory, "commit", "-q", "-m", "the demo NPU driver")
    return (
        directory,
        _git(directory, "rev-parse", "HEAD"),
        _git(directory, "rev-parse", "HEAD:driver"),
    )


def _description(commit: str, tree_id: str) -> dict:
    """dkms/demo-dkms.yaml: rocket-dkms's description with the demo driver's facts."""
    document = yaml.safe_load((ROOT / "dkms/rocket-dkms.yaml").read_text())
    document["package"].update(
        name=PACKAGE,
        module=MODULE,
        platform_driver=MODULE,
        npuctl_platform=FAMILY,
        family_names=["demo board", "demo-runtime"],
        npuctl_description={
            "npu": "the demo NPU of the demo board (demo-dkms)",
            "board": "the demo board (demo)",
            "models": ["no model yet"],
        },
        npuctl_requires=["demo-runtime>=1.0"],
        upstream_version="1.0.0",
        summary="DKMS source for the demo NPU driver (demo board)",
        description="Source of the {{ module }} kernel module of the demo NPU, built by DKMS "
        "for every installed arm64 kernel from {{ kernel_min }} on.",
        changelog={
            "entry": "Package the demo NPU driver at commit {{ upstream.commit[:12] }}.",
            "date": "Thu, 26 Nov 2026 00:00:00 +0000",
            "distribution": "unstable",
        },
    )
    document["package"].pop("user_space", None)  # rocket's Teflon: the demo has none
    document["upstream"] = {
        "repository": "https://example.org/demo-npu.git",
        "commit": commit,
        "commit_date": "20261126",
        "subtree": "driver",
        "tree_id": tree_id,
        "license": "GPL-2",
        "uapi_headers": [],
    }
    document["dkms"] = {
        "install": ["Kbuild", "demo.c"],
        "make_arguments": "DEMO_MODULE_VERSION=${PACKAGE_VERSION}",
    }
    document["kernel"] = {
        "min": "6.1",
        "tested_max": "7.3",
        "config_gate": ["CONFIG_ARM64"],
        "test_suite": "trixie",
    }
    document["device"] = {"node": MODULE, "subsystem": "misc", "group": "render", "mode": "0660"}
    document["firmware"] = {"acpi_ids": [], "compatibles": [COMPATIBLE]}
    document["board_files"] = [{"file": f"60-{PACKAGE}.rules.j2", "to": "usr/lib/udev/rules.d"}]
    document["lab"] = {
        "probe_evidence": "demo npu probed",
        "distribution_kernels": {
            "armbian-current-rockchip64": "build",
            "sky1-linux": "build",
            "vendor-bsp-6.6": "build",
        },
        "device_tree_node": f'npu@9230000 {{\n\tcompatible = "{COMPATIBLE}";\n}};\n',
    }
    document["appstream"] = {
        "name": "Demo NPU driver",
        "summary": "Kernel driver for the demo NPU",
        "description": "The demo NPU driver (demo.ko), built by DKMS for every installed arm64 "
        "kernel, with device access for the render group.",
    }
    return document


@dataclass(frozen=True)
class Scratch:
    tree: Path
    env: dict[str, str]  # the scratch's tools and npuctl first on the path, its own cache
    base: Path
    drivers_data: subprocess.CompletedProcess[str]  # 'make drivers-data' in the scratch

    def python(self, *args: str) -> subprocess.CompletedProcess[str]:
        return run(sys.executable, *args, cwd=self.tree, env=self.env)


def make_scratch(base: Path) -> Scratch:
    """The tree, copied, with the demo family added in its own places and nowhere else."""
    tree = base / "tree"
    shutil.copytree(ROOT, tree, symlinks=True, ignore=SCRATCH_IGNORED)
    upstream, commit, tree_id = _upstream(base / "upstream")
    (tree / f"dkms/{PACKAGE}.yaml").write_text(yaml.safe_dump(_description(commit, tree_id)))
    patches = tree / f"patches/{PACKAGE}"
    patches.mkdir()
    (patches / "0001-kbuild-build-demo-out-of-tree.patch").write_text(PATCH)
    (patches / "series").write_text("0001-kbuild-build-demo-out-of-tree.patch\n")
    (tree / f"provision/{PACKAGE}").mkdir()
    (tree / f"provision/{PACKAGE}/60-{PACKAGE}.rules.j2").write_text(
        f'KERNEL=="{MODULE}", GROUP="{{{{ device.group }}}}", MODE="{{{{ device.mode }}}}"\n'
    )
    platform = tree / f"npuctl/src/npuctl/platforms/{FAMILY}"
    platform.mkdir()
    (platform / "__init__.py").write_text(PLATFORM)
    (platform / "models.yaml").write_text(f"schema: 1\nplatform: {FAMILY}\nmodels: {{}}\n")
    (tree / f"npuctl/src/npuctl/serve/families/{FAMILY}.py").write_text(ADAPTER)
    env = {
        **os.environ,
        "PYTHONPATH": f"{tree / 'tools'}:{tree / 'npuctl/src'}",
        "AIPU_CACHE": str(base / "cache"),
        "UPSTREAM_GIT": str(upstream),
    }
    # What a maintainer runs after adding a family: npuctl's copy of the descriptions.
    drivers_data = run(
        "make", "-C", tree, "drivers-data", "DEPS_STAMP=", f"PY={sys.executable}", env=env
    )
    return Scratch(tree, env, base, drivers_data)


def build_deb(scratch: Scratch, dist: Path, suffix: str = "", lintian: bool = True) -> Path:
    """The demo family's .deb, built by the scratch tree's pipeline."""
    arguments = ["--build-dir", str(scratch.base / f"build{suffix}"), "--dist", str(dist)]
    arguments += ["--version-suffix", suffix] if suffix else []
    arguments += [] if lintian else ["--no-lintian"]
    result = scratch.python("-m", "pipeline", "--package", PACKAGE, "deb", *arguments)
    if result.returncode != 0:
        raise AssertionError(result.stdout + result.stderr)
    (deb,) = dist.glob(f"{PACKAGE}_*_all.deb")
    return deb
