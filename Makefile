# Entry points of the project. 'make deb' builds the packages, 'make test' runs the tests.
# Upstream source: UPSTREAM_GIT=<clone path or URL> or UPSTREAM_TARBALL=<file> (see README).

SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := deb

# Version N+1 of the packages is <version>+lab1, for upgrade tests.
NEXT_SUFFIX := lab1
VENV := .venv
PY := $(VENV)/bin/python
BUILD_TOOL := $(PY) -m aipu_build
BUILD := build
DIST := dist
DEPS_STAMP := $(VENV)/.deps-installed

export UPSTREAM_GIT UPSTREAM_TARBALL AIPU_CACHE

.PHONY: deps fetch patch quilt-tree deb lint-debian autopkgtest piuparts module test test-oldest \
	lint check-kernels bench clean

deps: $(DEPS_STAMP)
$(DEPS_STAMP): tools/install-deps.sh pyproject.toml npuctl/pyproject.toml
	tools/install-deps.sh
	touch $@

## fetch: get, verify (git tree id) and cache the pinned upstream driver subtree
fetch: $(DEPS_STAMP)
	$(BUILD_TOOL) fetch

## patch: write upstream + patches/ to build/src (for reading or a plain kbuild)
patch: $(DEPS_STAMP)
	$(BUILD_TOOL) patch $(BUILD)/src

## quilt-tree: a quilt working tree in build/quilt to edit or refresh patches/
quilt-tree: $(DEPS_STAMP)
	tools/quilt-tree.sh "$$($(BUILD_TOOL) fetch)" $(BUILD)/quilt

## deb: the Debian source and binary packages (aipu-dkms, npuctl) in dist/, lintian clean
deb: $(DEPS_STAMP)
	$(BUILD_TOOL) deb --build-dir $(BUILD) --dist $(DIST)
	$(BUILD_TOOL) npuctl-deb --build-dir $(BUILD)/npuctl --dist $(DIST)

## lint-debian: a newer Debian's lintian and appstreamcli on dist/, in a chroot (root)
LINT_SUITE ?= trixie
lint-debian: deb
	$(PY) -m kernel_lab lint --suite $(LINT_SUITE) --workdir $(BUILD)/lint $(DIST)/*.changes

## autopkgtest: the package's autopkgtest with arm64 cross headers, in a chroot (root)
autopkgtest: deb
	$(PY) -m kernel_lab autopkgtest --suite $(LINT_SUITE) --workdir $(BUILD)/autopkgtest \
		$$(ls $(DIST)/aipu-dkms_*_all.changes)

## piuparts: install, upgrade N -> N+1 and purge of both packages, nothing left (root)
piuparts: deb
	$(BUILD_TOOL) deb --build-dir $(BUILD)/next-build --dist $(BUILD)/next \
		--version-suffix $(NEXT_SUFFIX) --no-lintian >/dev/null
	$(BUILD_TOOL) npuctl-deb --build-dir $(BUILD)/next-build/npuctl --dist $(BUILD)/next \
		--version-suffix $(NEXT_SUFFIX) --no-lintian >/dev/null
	$(PY) -m kernel_lab piuparts --suite $(LINT_SUITE) --log $(BUILD)/piuparts.log \
		$$(ls $(DIST)/aipu-dkms_*_all.deb $(DIST)/npuctl_*_all.deb | sed 's/^/--previous /') \
		$$(ls $(BUILD)/next/aipu-dkms_*+$(NEXT_SUFFIX)-*_all.deb $(BUILD)/next/npuctl_*+$(NEXT_SUFFIX)_all.deb)

## module: plain kbuild of the patched tree against KDIR with -Werror (ARCH/CROSS_COMPILE as needed)
module: patch
	$(MAKE) -C "$(KDIR)" M="$(CURDIR)/$(BUILD)/src" KCFLAGS=-Werror modules

## test: every test, then npuctl's tests again on the oldest supported dependencies
test: $(DEPS_STAMP)
	$(PY) -m pytest $(PYTEST_ARGS)
	$(MAKE) --no-print-directory test-oldest

## test-oldest: npuctl's tests on Debian 12's python3 packages (npuctl/constraints-oldest.txt)
OLDEST_VENV := .venv-oldest
OLDEST_PYTHON ?= /usr/bin/python3
OLDEST_STAMP := $(OLDEST_VENV)/.deps-installed
$(OLDEST_STAMP): npuctl/constraints-oldest.txt npuctl/pyproject.toml pyproject.toml $(DEPS_STAMP)
	rm -rf $(OLDEST_VENV)
	$(OLDEST_PYTHON) -m venv --system-site-packages $(OLDEST_VENV)
	$(OLDEST_VENV)/bin/python -m pip install -q --disable-pip-version-check \
		-c npuctl/constraints-oldest.txt pytest jinja2 -e . -e ./npuctl
	touch $@
test-oldest: $(OLDEST_STAMP)
	NPUCTL_OLDEST_DEPS=npuctl/constraints-oldest.txt $(OLDEST_VENV)/bin/python -m pytest \
		-p no:cacheprovider $(PYTEST_ARGS) tests/npuctl

## lint: ruff and shellcheck
lint: $(DEPS_STAMP)
	$(VENV)/bin/ruff check tools tests npuctl bench
	$(VENV)/bin/ruff format --check tools tests npuctl bench
	shellcheck tools/*.sh .ci/run

clean:
	rm -rf $(BUILD) $(DIST)

## check-kernels: the kernel matrix on Debian's real arm64 kernels (SUITES=a,b to narrow,
## KERNELS=linux-headers-X,... to test only those headers packages)
SUITES ?= bookworm,trixie,trixie-backports,sid,experimental
KERNELS ?=
check-kernels: deb patch
	$(BUILD_TOOL) deb --build-dir $(BUILD)/next-build --dist $(BUILD)/next \
		--version-suffix $(NEXT_SUFFIX) --no-lintian >/dev/null
	version=$$($(BUILD_TOOL) version --upstream); \
	revision=$$($(BUILD_TOOL) version | sed 's/.*-//'); \
	$(PY) -m kernel_lab matrix --suites $(SUITES) --kernels "$(KERNELS)" \
		--deb $(DIST)/aipu-dkms_$${version}-$${revision}_all.deb --version $${version} \
		--next-deb $(BUILD)/next/aipu-dkms_$${version}+$(NEXT_SUFFIX)-$${revision}_all.deb \
		--next-version $${version}+$(NEXT_SUFFIX) \
		--patched-tree $(BUILD)/src --workdir $(BUILD)/lab --json $(DIST)/kernel-matrix.json

## bench: npuctl's host-side cost with the libnoe test double, beside reference implementations
bench: $(DEPS_STAMP)
	$(PY) -m bench.host_cost
