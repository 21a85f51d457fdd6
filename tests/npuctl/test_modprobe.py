"""Blacklists of the NPU driver wherever modprobe reads them: the files that win by name, the
'install ... /bin/false' form, '-' and '_' alike, and the kernel command line."""

from __future__ import annotations

from pathlib import Path

from npuctl.modprobe import blacklistings, configuration_files
from npuctl.system import System


def write(root: Path, absolute: str, text: str) -> None:
    path = root / absolute.lstrip("/")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_every_folder_and_form_is_found(tmp_path: Path):
    write(tmp_path, "/etc/modprobe.d/armbian.conf", "# the NPU\n\nblacklist aipu\n")
    write(tmp_path, "/usr/lib/modprobe.d/vendor.conf", "options x y=1\ninstall aipu /bin/false\n")
    write(tmp_path, "/run/modprobe.d/run.conf", "blacklist   aipu  # for now\n")
    write(tmp_path, "/lib/modprobe.d/old.conf", "blacklist aipu_other\nblacklist rocket\n")
    write(tmp_path, "/proc/cmdline", "root=/dev/sda1 module_blacklist=foo,aipu quiet\n")
    found = [(b.where, b.text) for b in blacklistings(System(tmp_path), "aipu")]
    assert found == [
        ("/etc/modprobe.d/armbian.conf:3", "blacklist aipu"),
        ("/run/modprobe.d/run.conf:1", "blacklist   aipu  # for now"),
        ("/usr/lib/modprobe.d/vendor.conf:2", "install aipu /bin/false"),
        ("/proc/cmdline", "module_blacklist=foo,aipu"),
    ]


def test_a_file_in_etc_hides_the_packaged_one_of_its_name(tmp_path: Path):
    write(tmp_path, "/usr/lib/modprobe.d/npu.conf", "blacklist rocket\n")
    write(tmp_path, "/etc/modprobe.d/npu.conf", "# rocket allowed here\n")
    system = System(tmp_path)
    assert configuration_files(system) == ["/etc/modprobe.d/npu.conf"]
    assert blacklistings(system, "rocket") == []


def test_dash_and_underscore_name_one_module_and_comments_do_not_count(tmp_path: Path):
    write(tmp_path, "/etc/modprobe.d/a.conf", "blacklist my-npu\n# blacklist other_npu\n")
    write(tmp_path, "/etc/modprobe.d/b.txt", "blacklist other_npu\n")  # not a .conf
    write(tmp_path, "/proc/cmdline", "modprobe.blacklist=other-npu\n")
    system = System(tmp_path)
    assert [b.where for b in blacklistings(system, "my_npu")] == ["/etc/modprobe.d/a.conf:1"]
    assert [b.text for b in blacklistings(system, "other_npu")] == ["modprobe.blacklist=other-npu"]


def test_an_install_line_that_runs_something_is_not_a_blacklist(tmp_path: Path):
    write(tmp_path, "/etc/modprobe.d/a.conf", "install aipu /sbin/modprobe --ignore-install aipu\n")
    assert blacklistings(System(tmp_path), "aipu") == []
