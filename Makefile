# Entry points of the project. 'make deb' builds the packages, 'make test' runs the tests.
# Upstream sources, per package: UPSTREAM_GIT_<PACKAGE>=<clone path or URL> or
# UPSTREAM_TARBALL_<PACKAGE>=<file> (UPSTREAM_GIT_AIPU_COMPASS_DKMS=...); the plain
# UPSTREAM_GIT / UPSTREAM_TARBALL for every package without its own (docs/drivers.md).
# PACKAGE=<driver package> (dkms/<name>.yaml) for fetch, patch, quilt-tree and module.

SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := deb

# Version N+1 of the packages is <version>+lab1, for upgrade tests.
NEXT_SUFFIX := lab1
VENV := .venv
PY := $(VENV)/bin/python
BUILD_TOOL := $(PY) -m pipeline
BUILD := build
DIST := dist
DEPS_STAMP := $(VENV)/.deps-installed
# pytest's and ruff's configuration is in tools/pyproject.toml; the tests are tests/.
PYTEST := -c tools/pyproject.toml --rootdir .

PACKAGE ?= $(firstword $(sort $(basename $(notdir $(wildcard dkms/*.yaml)))))

export UPSTREAM_GIT UPSTREAM_TARBALL AIPU_CACHE DEBIAN_MIRROR

.PHONY: deps fetch patch quilt-tree deb drivers-data repo rebuild-library lint-debian autopkgtest piuparts module test test-oldest test-rootless k8s image \
	check-images check-rocket-emu lint check-kernels check-trials trial-tables bench bench-vision bench-busy bench-tables matrix-tables emu-tables serve-tables docs-tables clean

# arm64 emulation is switched on again each time (a reboot or a new container loses it).
deps: $(DEPS_STAMP)
	$(PY) -m arm64_emulation ensure --quiet || true
$(DEPS_STAMP): tools/install-deps.sh tools/pyproject.toml npuctl/pyproject.toml
	tools/install-deps.sh
	touch $@

## fetch: get, verify (git tree id) and cache every driver package's pinned upstream source,
## and the pinned libnoe .deb the driver-line tests run (from aipu-dkms's upstream); with
## FRIGATE_GIT=<clone of blakeblackshear/frigate>, Frigate's pinned files the tests run
# Every package is tried: one whose upstream cannot be reached does not keep the others'
# sources (and their tests) away; the exit status says that one failed.
fetch: $(DEPS_STAMP)
	failed=0; for package in $$($(BUILD_TOOL) packages); do \
		$(BUILD_TOOL) --package $$package fetch || failed=$$?; done; \
	$(PY) -m testkit.fake_aipu fetch || failed=$$?; \
	$(if $(FRIGATE_GIT),$(PY) -m rocket_emu frigate --frigate-git $(FRIGATE_GIT) || failed=$$?;) \
	exit $$failed

## patch: write PACKAGE's upstream + patches to build/src (for reading or a plain kbuild)
patch: $(DEPS_STAMP)
	$(BUILD_TOOL) --package $(PACKAGE) patch $(BUILD)/src

## quilt-tree: a quilt working tree of PACKAGE in build/quilt to edit or refresh its patches
quilt-tree: $(DEPS_STAMP)
	tools/quilt-tree.sh "$$($(BUILD_TOOL) --package $(PACKAGE) fetch)" $(BUILD)/quilt \
		patches/$(PACKAGE)

## deb: the Debian source and binary packages (every driver package, npuctl) in dist/,
## lintian clean
deb: $(DEPS_STAMP)
	for package in $$($(BUILD_TOOL) packages); do \
		$(BUILD_TOOL) --package $$package deb --build-dir $(BUILD)/$$package --dist $(DIST); \
	done
	$(BUILD_TOOL) npuctl-deb --build-dir $(BUILD)/npuctl --dist $(DIST)

## drivers-data: npuctl's drivers.json from dkms/*.yaml (commit it; 'make deb' and the tests
## fail when it is out of date)
drivers-data: $(DEPS_STAMP)
	$(BUILD_TOOL) npuctl-drivers

## lint-debian: a newer Debian's lintian and appstreamcli on dist/ (every upload, and the arm64
## library packages built without one), in a chroot (root)
LINT_SUITE ?= trixie
lint-debian: deb
	$(PY) -m kernel_lab lint --suite $(LINT_SUITE) --workdir $(BUILD)/lint $(DIST)/*.changes \
		$(wildcard $(DIST)/*_arm64.deb)

## rebuild-library: each library's source package rebuilt from its .dsc as Debian's builders
## would: dpkg-source -x, its build dependencies for arm64, dpkg-buildpackage -a arm64 in a
## clean chroot of LINT_SUITE, then that suite's lintian (and --pedantic, for review) (root)
rebuild-library: deb
	for package in $$($(BUILD_TOOL) packages); do \
		source=$$($(BUILD_TOOL) --package $$package library-source); \
		[ -z "$$source" ] || $(PY) -m kernel_lab rebuild --suite $(LINT_SUITE) \
			--workdir $(BUILD)/rebuild --out $(BUILD)/rebuilt $$(ls $(DIST)/$${source}_*.dsc) \
			|| exit 1; \
	done

## repo: the signed apt repository in dist/repo from what 'make deb' built (REPO_KEY=secret
## key file or REPO_GNUPGHOME=folder; without either a throwaway key, said loudly)
REPO_KEY ?=
REPO_GNUPGHOME ?=
repo: $(DEPS_STAMP)
	$(BUILD_TOOL) repo --dist $(DIST) --repo $(DIST)/repo --work $(BUILD)/repo \
		$(if $(REPO_KEY),--key $(REPO_KEY)) $(if $(REPO_GNUPGHOME),--gnupg-home $(REPO_GNUPGHOME))

## autopkgtest: each driver package's autopkgtest with arm64 headers, in a chroot of the
## suite its dkms/<name>.yaml names (kernel.test_suite) (root)
autopkgtest: deb
	for package in $$($(BUILD_TOOL) packages); do \
		$(PY) -m kernel_lab autopkgtest --suite "$$($(BUILD_TOOL) --package $$package test-suite)" \
			--workdir $(BUILD)/autopkgtest/$$package $$(ls $(DIST)/$${package}_*_all.changes) \
			|| exit 1; \
	done

## piuparts: install, upgrade N -> N+1 and purge of every package, nothing left (root)
piuparts: deb
	for package in $$($(BUILD_TOOL) packages); do \
		$(BUILD_TOOL) --package $$package deb --build-dir $(BUILD)/next-build/$$package \
			--dist $(BUILD)/next --version-suffix $(NEXT_SUFFIX) --no-lintian >/dev/null; \
	done
	$(BUILD_TOOL) npuctl-deb --build-dir $(BUILD)/next-build/npuctl --dist $(BUILD)/next \
		--version-suffix $(NEXT_SUFFIX) --no-lintian >/dev/null
	$(PY) -m kernel_lab piuparts --suite $(LINT_SUITE) --log $(BUILD)/piuparts.log \
		$$(ls $(DIST)/*_all.deb | sed 's/^/--previous /') \
		$$(ls $(BUILD)/next/*+$(NEXT_SUFFIX)*_all.deb)

## module: plain kbuild of the patched tree against KDIR with -Werror (ARCH/CROSS_COMPILE as needed)
module: patch
	$(MAKE) -C "$(KDIR)" M="$(CURDIR)/$(BUILD)/src" KCFLAGS=-Werror modules

## test: every test; and beside its last part, which builds and checks packages one process
## at a time, npuctl's tests again on the oldest supported dependencies, then the board-image
## scenarios again as a user without root (their output printed whole at the end)
test: $(DEPS_STAMP)
	$(PY) -m pytest $(PYTEST) --durations=25 \
		--beside-idle-core "$(MAKE) --no-print-directory test-oldest test-rootless" \
		$(or $(PYTEST_ARGS),tests)

## test-oldest: npuctl's tests on Debian 12's python3 packages (npuctl/constraints-oldest.txt)
OLDEST_VENV := .venv-oldest
OLDEST_PYTHON ?= /usr/bin/python3
OLDEST_STAMP := $(OLDEST_VENV)/.deps-installed
$(OLDEST_STAMP): npuctl/constraints-oldest.txt npuctl/pyproject.toml tools/pyproject.toml $(DEPS_STAMP)
	rm -rf $(OLDEST_VENV)
	$(OLDEST_PYTHON) -m venv --system-site-packages $(OLDEST_VENV)
	$(OLDEST_VENV)/bin/python -m pip install -q --disable-pip-version-check \
		-c npuctl/constraints-oldest.txt pytest tflite openai qdrant-client kubernetes-validate pyzmq -e ./tools -e './npuctl[families,onnx,serve,watch]'
	touch $@
test-oldest: $(OLDEST_STAMP)
	NPUCTL_OLDEST_DEPS=npuctl/constraints-oldest.txt $(OLDEST_VENV)/bin/python -m pytest \
		-p no:cacheprovider $(PYTEST) -m "not sysroot_python" $(PYTEST_ARGS) tests/npuctl

## test-rootless: the board-image scenarios (doctor, provision, CDI, fleet labels, hardening)
## without root's privileges (as root: in a user namespace, no mknod, no chown): device
## nodes and owners come from the image's inode table
ROOTLESS_TESTS := $(addprefix tests/npuctl/,test_doctor.py test_noe_paths.py test_provision.py \
	test_rocket_doctor.py test_rocket_provision.py test_cdi.py test_fleet_labels.py test_hardening.py)
test-rootless: $(DEPS_STAMP)
	tools/run-unprivileged.sh $(PY) -m pytest -p no:cacheprovider $(PYTEST) $(PYTEST_ARGS) \
		$(ROOTLESS_TESTS)

## image: the container images of images/*.yaml (npuctl serve with each family's user space)
## for arm64 and amd64 in dist/images, from Debian's archive, PyPI and the .debs 'make deb'
## wrote (root; arm64 runs under qemu-user-static, which 'make deps' enables). IMAGES=npuctl,... and
## ARCHITECTURES=amd64 narrow it; builds run side by side, IMAGE_JOBS at a time (default: one a
## CPU); REGISTRY=host[:port]/path then pushes each image's
## architectures under one name (REGISTRY_TLS_VERIFY=false for a plain-HTTP registry).
IMAGES ?=
ARCHITECTURES ?=
IMAGE_JOBS ?=
REGISTRY ?=
REGISTRY_TLS_VERIFY ?= true
IMAGE_TOOL = $(PY) -m oci_image --images "$(IMAGES)" --architectures "$(ARCHITECTURES)" \
	--dist $(DIST)
image: $(DEPS_STAMP)
	$(IMAGE_TOOL) build --work $(BUILD)/images $(if $(IMAGE_JOBS),--jobs $(IMAGE_JOBS))
	$(if $(REGISTRY),$(IMAGE_TOOL) push --registry $(REGISTRY) \
		$(if $(filter false,$(REGISTRY_TLS_VERIFY)),--no-tls-verify))

## check-images: the container image tests in full, arm64 under emulation included (root)
check-images: $(DEPS_STAMP)
	NPUCTL_IMAGE_TESTS=full $(PY) -m pytest $(PYTEST) tests/test_container_images.py

## check-rocket-emu: the RK3588 board in QEMU with its NPU model (emulation/rk3588.yaml):
## QEMU and the board's root file system (rocket-dkms built by DKMS, Teflon, npuctl) are built
## and cached, then one boot runs, under each pinned Teflon, doctor and the golden checks,
## then serve (root; the first run needs EMULATOR_GIT=<clone of widgetii/orangepi5plus-npu>
## and FRIGATE_GIT=<clone of blakeblackshear/frigate>; CORAL_GIT=<clone of google-coral/test_data>
## adds the published models, run as Mesa's tests run them; Mesa's own test models come from
## Debian's orig tarball of Mesa in the archive, pinned; PEER_GIT=<clone of
## gregordinary/rocket-userspace> adds a peer's hardware-validated gates, built for arm64)
EMULATOR_GIT ?=
FRIGATE_GIT ?=
CORAL_GIT ?=
PEER_GIT ?=
check-rocket-emu: deb
	$(PY) -m rocket_emu prepare --dist $(DIST) --work $(BUILD)/rocket-emu \
		$(if $(EMULATOR_GIT),--emulator-git $(EMULATOR_GIT)) \
		$(if $(FRIGATE_GIT),--frigate-git $(FRIGATE_GIT)) \
		$(if $(CORAL_GIT),--coral-git $(CORAL_GIT)) \
		$(if $(PEER_GIT),--peer-git $(PEER_GIT))
	NPUCTL_ROCKET_EMU=full $(PY) -m pytest $(PYTEST) -s tests/test_rocket_emulator.py

## k8s: the Kubernetes / K3s manifests of npuctl serve (dist/k8s/), CDI and device-plugin variants
k8s: $(DEPS_STAMP)
	mkdir -p $(DIST)/k8s
	$(PY) -m npuctl k8s render --output $(DIST)/k8s/npuctl-serve-cdi.yaml
	$(PY) -m npuctl k8s render --device-via device-plugin \
		--output $(DIST)/k8s/npuctl-serve-device-plugin.yaml

## lint: ruff and shellcheck
# All of npuctl: each family against npuctl.platform's interface, each serving adapter
# against its own, and the shared parts that call them.
TYPED = npuctl/src/npuctl
lint: $(DEPS_STAMP)
	$(VENV)/bin/ruff check --config tools/pyproject.toml tools tests npuctl
	$(VENV)/bin/ruff format --config tools/pyproject.toml --check tools tests npuctl
	$(VENV)/bin/lint-imports --no-cache tools/pyproject.toml
	$(PY) -m pipeline.family_lint
	$(PY) -m mypy --config-file tools/pyproject.toml $(TYPED)
	shellcheck tools/*.sh .ci/run tools/rocket_emu/guest/init

clean:
	rm -rf $(BUILD) $(DIST)

## check-kernels: the kernel matrix on Debian's real arm64 kernels, every driver package
## (SUITES=a,b to narrow, KERNELS=linux-headers-X,... to test only those headers packages,
## PACKAGES=rocket-dkms,... to test only those driver packages)
SUITES ?= bookworm,trixie,trixie-backports,sid,experimental
KERNELS ?=
PACKAGES ?=
check-kernels: deb
	packages="$(PACKAGES)"; packages=$${packages:-$$($(BUILD_TOOL) packages | paste -sd,)}; \
	for package in $${packages//,/ }; do \
		$(BUILD_TOOL) --package $$package deb --build-dir $(BUILD)/next-build/$$package \
			--dist $(BUILD)/next --version-suffix $(NEXT_SUFFIX) --no-lintian >/dev/null; \
		$(BUILD_TOOL) --package $$package patch $(BUILD)/lab-src/$$package >/dev/null; \
	done; \
	$(PY) -m kernel_lab matrix --suites $(SUITES) --kernels "$(KERNELS)" --packages $$packages \
		--dist $(DIST) --next-dist $(BUILD)/next --next-suffix $(NEXT_SUFFIX) \
		--src-dir $(BUILD)/lab-src --workdir $(BUILD)/lab --json $(DIST)/kernel-matrix.json
	$(MAKE) --no-print-directory check-trials

## check-trials: the guarded first load booted in QEMU under oops=panic panic=1, on one disk:
## a test-only build that oopses in its probe (boot 1 panics, boot 2 holds it), a fixed
## version's one new trial, and the package's real module's first trial, on the current
## arm64 kernel of each package's test suite (TRIAL_SUITE=<suite> for all), every driver
## package (PACKAGES to narrow) (root)
TRIAL_SUITE ?=
check-trials: deb
	packages="$(PACKAGES)"; packages=$${packages:-$$($(BUILD_TOOL) packages | paste -sd,)}; \
	$(PY) -m kernel_lab trial --suite "$(TRIAL_SUITE)" --packages $$packages --dist $(DIST) \
		--workdir $(BUILD)/trial-lab --json $(DIST)/kernel-trials.json

## bench: npuctl's host-side cost with the libnoe test double, beside reference implementations;
## every verdict a ratio to a reference timed in the same rounds, or an instruction count; and
## the size of each container image 'make image' left in dist/images against its bound (it
## builds nothing; an image not built is a row not run, without a verdict). Exit 0 every
## target met, 1 a target missed, 3 a benchmark could not run here (JSON reports in
## dist/bench/$(BENCH_RUN))
BENCH_RUN ?= quiet
BENCH_CONDITIONS ?= the machine as it was
bench: $(DEPS_STAMP)
	BENCH_REPORT_DIR=$(DIST)/bench/$(BENCH_RUN) BENCH_CONDITIONS="$(BENCH_CONDITIONS)" \
		$(PY) -m bench

## bench-vision: only vision serving's part of 'make bench': host cost, Frigate-style clients
## and --workers scaling, with the libnoe and Teflon doubles taking each model's NPU time
bench-vision: $(DEPS_STAMP)
	BENCH_REPORT_DIR=$(DIST)/bench/$(BENCH_RUN) BENCH_CONDITIONS="$(BENCH_CONDITIONS)" \
		$(PY) -m bench.vision_cost

## bench-busy: 'make bench' beside a CPU-heavy job (a busy process per core): same verdicts
bench-busy: $(DEPS_STAMP)
	$(PY) -m bench.neighbour $(MAKE) --no-print-directory bench BENCH_RUN=busy \
		BENCH_CONDITIONS="beside a CPU-heavy job (a busy process per core)"

## bench-tables: docs/benchmarks.md from the reports of 'make bench' and 'make bench-busy'
bench-tables: $(DEPS_STAMP)
	$(PY) -m bench.tables $(DIST)/bench/quiet $(DIST)/bench/busy docs/benchmarks.md

## matrix-tables: docs/kernel-matrix-results.md from dist/kernel-matrix.json (make check-kernels)
matrix-tables: $(DEPS_STAMP)
	$(PY) -m kernel_lab.tables $(DIST)/kernel-matrix.json docs/kernel-matrix-results.md
	$(PY) -m kernel_lab.trial_tables $(DIST)/kernel-trials.json docs/kernel-matrix-results.md

## trial-tables: the first-load trials' rows of docs/kernel-matrix-results.md from
## dist/kernel-trials.json (make check-trials), the matrix's table left as it is
trial-tables: $(DEPS_STAMP)
	$(PY) -m kernel_lab.trial_tables $(DIST)/kernel-trials.json docs/kernel-matrix-results.md

## emu-tables: docs/emulated-board-results.md from dist/rocket-emu.json (make check-rocket-emu)
emu-tables: $(DEPS_STAMP)
	$(PY) -m rocket_emu.tables $(DIST)/rocket-emu.json docs/emulated-board-results.md

## serve-tables: docs/serving.md's routes and limits, from npuctl serve's own route table and options
serve-tables: $(DEPS_STAMP)
	$(PY) -m serve_tables docs/serving.md

## docs-tables: every generated table of docs/
docs-tables: bench-tables matrix-tables emu-tables serve-tables
