"""The Zhouyi drivers' IOVA reservation (patch 0006) follows the kernel's own headers: the
driver's copy of struct iommu_dma_cookie has the type field Linux removed in the 6.15 cycle,
when struct iommu_domain gained cookie_type. The driver's real Kbuild probes a header tree
through kbuild's own try-run, and aipu_compat.h turns the result into the gate.

The header trees are synthetic and minimal: struct iommu_domain declared as Linux 6.1/6.6
and 7.2 declare the fields the probe reads (each named by its version below), with a
LINUX_VERSION_CODE that a version gate would get wrong. Real Debian headers need the kernel
lab's chroots (a cross compiler of the suite's own and its kbuild tools, minutes a suite);
the probe's outcome depends only on these declarations, which the synthetic trees carry as
the kernels do."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from pipeline.config import load_package, package_names
from pipeline.fetch import find_upstream
from pipeline.patching import patched_copy

ZHOUYI = [name for name in package_names() if load_package(name).npuctl_platform == "zhouyi"]

# struct iommu_domain up to 6.14 (6.1's and 6.6's include/linux/iommu.h): the cookie pointer,
# no cookie type.
DOMAIN_UP_TO_6_14 = """
struct iommu_dma_cookie;
struct iommu_domain {
	unsigned type;
	const struct iommu_domain_ops *ops;
	unsigned long pgsize_bitmap;
	struct iommu_dma_cookie *iova_cookie;
};
"""
# From 6.15 ("iommu: Sort out domain user data"; 7.2's include/linux/iommu.h): cookie_type,
# and the cookie pointer in a union with the other users' data.
DOMAIN_FROM_6_15 = """
enum iommu_domain_cookie_type {
	IOMMU_COOKIE_NONE,
	IOMMU_COOKIE_DMA_IOVA,
	IOMMU_COOKIE_DMA_MSI,
};
struct iommu_dma_cookie;
struct iommu_dma_msi_cookie;
struct iommu_domain {
	unsigned type;
	enum iommu_domain_cookie_type cookie_type;
	const struct iommu_domain_ops *ops;
	unsigned long pgsize_bitmap;
	union {
		struct iommu_dma_cookie *iova_cookie;
		struct iommu_dma_msi_cookie *msi_cookie;
	};
};
"""
# A header the probe cannot compile (a kernel whose iommu.h needs what the probe lacks).
DOMAIN_UNREADABLE = "#error not this kernel's header\n"

# What kbuild gives a Kbuild file that matters to the probes: scripts/Makefile.compiler's
# try-run, the compiler and the include and warning flags (-Werror as 'make module' adds it).
HARNESS = r"""
TMPOUT := $(OUT)/.tmp_$$$$
try-run = $(shell set -e;		\
	TMP=$(TMPOUT)/tmp;		\
	trap "rm -rf $(TMPOUT)" EXIT;	\
	mkdir -p $(TMPOUT);		\
	if ($(1)) >/dev/null 2>&1;	\
	then echo "$(2)";		\
	else echo "$(3)";		\
	fi)
CC := gcc
LINUXINCLUDE := -nostdinc -I$(HEADERS)/include
KBUILD_CPPFLAGS := -D__KERNEL__
KBUILD_CFLAGS := -Wall -Wmissing-prototypes -Werror
src := $(SRC)
include $(SRC)/Kbuild
$(info CCFLAGS $(filter -D%,$(ccflags-y)))
all: ;
"""


def _headers(root: Path, version: tuple[int, int, int], domain: str) -> Path:
    (root / "include/linux").mkdir(parents=True)
    code = (version[0] << 16) + (version[1] << 8) + version[2]
    (root / "include/linux/version.h").write_text(
        f"#define LINUX_VERSION_CODE {code}\n"
        "#define KERNEL_VERSION(a, b, c) (((a) << 16) + ((b) << 8) + (c))\n",
        encoding="utf-8",
    )
    (root / "include/linux/iommu.h").write_text(
        f"#ifndef _IOMMU_H\n#define _IOMMU_H\n{domain}#endif\n", encoding="utf-8"
    )
    return root


def _probe_defines(tree: Path, headers: Path, scratch: Path) -> list[str]:
    """The -D flags the driver's Kbuild adds against ``headers``."""
    harness = scratch / "harness.mk"
    harness.write_text(HARNESS, encoding="utf-8")
    done = subprocess.run(
        ["make", "-s", "-f", str(harness), f"SRC={tree}", f"HEADERS={headers}", f"OUT={scratch}"],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    line = next(line for line in done.stdout.splitlines() if line.startswith("CCFLAGS"))
    return line.split()[1:]


def _reservation_built(tree: Path, headers: Path, defines: list[str]) -> bool:
    """AIPU_IOMMU_DMA_COOKIE_LAYOUT_KNOWN as aipu_mm.c sees it with those flags."""
    source = '#include "aipu_compat.h"\nlayout_known = AIPU_IOMMU_DMA_COOKIE_LAYOUT_KNOWN\n'
    done = subprocess.run(
        [
            "gcc",
            "-E",
            "-P",
            "-nostdinc",
            f"-I{headers}/include",
            "-D__KERNEL__",
            *defines,
            f"-I{tree}/armchina-npu",
            "-x",
            "c",
            "-",
        ],
        input=source,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    value = done.stdout.strip().splitlines()[-1].split("=", 1)[1].strip()
    return {"1": True, "0": False}[value]


@pytest.fixture(scope="module", params=ZHOUYI)
def patched_tree(request, tmp_path_factory) -> Path:
    config = load_package(request.param)
    upstream = find_upstream(config)
    if upstream is None:
        pytest.skip(f"{request.param}'s upstream tree is not in the cache: run 'make fetch'")
    return patched_copy(
        upstream, tmp_path_factory.mktemp(request.param) / "src", config.patches_dir
    )


@pytest.mark.upstream
@pytest.mark.parametrize(
    ("kernel", "version", "domain", "reserved"),
    [
        # A 6.4 version gate skipped these for nothing: their cookie has the type field.
        ("6.1", (6, 1, 0), DOMAIN_UP_TO_6_14, True),
        ("6.6 (the vendor's)", (6, 6, 89), DOMAIN_UP_TO_6_14, True),
        ("6.14", (6, 14, 11), DOMAIN_UP_TO_6_14, True),
        ("6.15", (6, 15, 0), DOMAIN_FROM_6_15, False),
        ("7.2", (7, 2, 8), DOMAIN_FROM_6_15, False),
        # The layout, not the number: a 7.x-numbered tree with the old layout keeps it.
        ("7.2 numbered, old layout", (7, 2, 8), DOMAIN_UP_TO_6_14, True),
        # A probe that cannot compile leaves the reservation out (the safe side).
        ("unreadable iommu.h", (6, 1, 0), DOMAIN_UNREADABLE, False),
    ],
)
def test_iova_reservation_follows_the_headers_layout(
    patched_tree, tmp_path, kernel, version, domain, reserved
):
    headers = _headers(tmp_path / "headers", version, domain)
    defines = _probe_defines(patched_tree, headers, tmp_path)
    assert ("-DAIPU_IOMMU_DMA_COOKIE_HAS_TYPE" in defines) == reserved, (kernel, defines)
    assert _reservation_built(patched_tree, headers, defines) == reserved, kernel


@pytest.mark.upstream
def test_reservation_is_gated_by_the_layout_only(patched_tree):
    compat = (patched_tree / "armchina-npu/aipu_compat.h").read_text(encoding="utf-8")
    gate = compat[compat.index("AIPU_IOMMU_DMA_COOKIE_HAS_TYPE") :]
    gate = gate[: gate.index("#endif")]
    assert "LINUX_VERSION_CODE" not in gate
    mm = (patched_tree / "armchina-npu/aipu_mm.c").read_text(encoding="utf-8")
    function = mm[mm.index("aipu_mm_reserved_iova_for_never_map(") :]
    assert function.index("AIPU_IOMMU_DMA_COOKIE_LAYOUT_KNOWN") < function.index("iova_cookie")
