#!/usr/bin/env bash
# Installs what building and testing the project needs: Debian packages (apt) and a Python
# virtual environment (.venv, pip). Safe to run again: it installs only what is missing.
set -euo pipefail

cd "$(dirname "$0")/.."

packages=(
	git quilt tar xz-utils make fakeroot       # fetch, patch, orig tarball
	dpkg-dev debhelper dh-dkms lintian         # the Debian packages
	dh-python pybuild-plugin-pyproject python3-all python3-setuptools
	devscripts appstream piuparts              # upload-set checks, AppStream, piuparts
	aptly gnupg                                # the signed apt repository
	python3-click python3-numpy python3-packaging python3-pil python3-prometheus-client
	python3-regex python3-yaml python3-psutil python3-jinja2 python3-aiohttp python3-uvloop
	python3-jsonschema                         # the descriptions' and manifests' schemas
	python3-httptools                          # builds npuctl 0.1.0, where the upgrade test starts
	python3-zmq                                # Frigate's ZeroMQ client, at Debian 12's version (make test-oldest)
	python3 python3-venv                       # the build tools and npuctl
	debootstrap zstd                           # Debian chroots with real kernel headers
	gcc-aarch64-linux-gnu libc6-dev-arm64-cross  # cross builds: arm64 headers, the accel shim
	libstdc++6-arm64-cross                     # the real libnoe (C++) under qemu-aarch64
	g++-aarch64-linux-gnu                      # Arm China's libaipudrv (C++), built for arm64
	qemu-user                                  # Debian's arm64 Teflon under npuctl's probe
	podman runc busybox-static                 # a real container given the NPU through CDI
	mmdebstrap arch-test                       # make image, the emulated board: root file systems
	qemu-user-static binfmt-support            # arm64 maintainer scripts and images, emulated
	shellcheck                                 # lint
	curl valgrind                              # a real client of npuctl serve; instruction counts in make bench
	nodejs                                     # Immich's client logic (fetch, FormData) against npuctl serve
	gcc                                        # the libnoe test double
	qemu-system-arm qemu-efi-aarch64 acpica-tools device-tree-compiler cpio kmod  # kernel boots
	libglib2.0-dev libfdt-dev libpixman-1-dev libslirp-dev ninja-build pkg-config  # QEMU with the RK3588 machine
)

missing=()
for package in "${packages[@]}"; do
	if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
		missing+=("$package")
	fi
done

if [ ${#missing[@]} -gt 0 ]; then
	sudo_cmd=()
	if [ "$(id -u)" -ne 0 ]; then
		command -v sudo >/dev/null || { echo "install-deps: run as root or install sudo" >&2; exit 5; }
		sudo_cmd=(sudo)
	fi
	echo "install-deps: installing ${missing[*]}"
	"${sudo_cmd[@]}" apt-get update -qq
	DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

python=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
	"$python" -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -e './tools[dev]' -e './npuctl[ftfy,families,onnx,serve,watch,orjson,uvloop]'

# With no init system nothing mounts binfmt_misc or enables qemu-aarch64; the arm64 targets
# need both. Where this machine cannot (no root, a kernel or container without binfmt_misc)
# it says so in one line with the host's command, and the rest of the set-up stands.
emulation=(.venv/bin/python -m arm64_emulation ensure)
if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null; then
	emulation=(sudo "${emulation[@]}")
fi
"${emulation[@]}" || echo "install-deps: the arm64 targets (make image, make check-rocket-emu) cannot run here until then" >&2
