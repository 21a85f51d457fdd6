"""Each driver is described once (dkms/<package>.yaml) and every board-side file has one
owner: npuctl's drivers.json is that description, regenerated, and every file under
provision/ belongs to exactly one package or provision action."""

import tomllib
from pathlib import Path

import pytest
import yaml

from npuctl import drivers as npuctl_side
from pipeline import npuctl_drivers
from pipeline.config import MODULE_TRIAL_DIR, PROVISION_DIR, SOCS_DIR, load_package, package_names
from pipeline.errors import BuildError

from .conftest import run

ROOT = Path(__file__).resolve().parents[1]


def test_npuctl_drivers_json_is_generated_from_the_descriptions():
    assert npuctl_drivers.DRIVERS_JSON.read_text() == npuctl_drivers.document()


def test_the_build_refuses_a_drifted_copy_and_names_the_fix(tmp_path):
    drifted = tmp_path / "drivers.json"
    drifted.write_text(npuctl_drivers.document().replace('"aipu"', '"aipu2"'))
    with pytest.raises(BuildError, match="run 'make drivers-data'"):
        npuctl_drivers.check(drifted)
    result = run(ROOT / ".venv/bin/python", "-m", "pipeline", "npuctl-drivers", "--check", cwd=ROOT)
    assert result.returncode == 0, result.stderr


def test_the_families_extras_are_generated_from_the_descriptions(tmp_path):
    text = npuctl_drivers.PYPROJECT.read_text()
    extras = tomllib.loads(text)["project"]["optional-dependencies"]
    for name in package_names():
        config = load_package(name)
        if config.npuctl_requires:
            assert extras[config.npuctl_platform] == list(config.npuctl_requires)
        else:
            assert config.npuctl_platform not in extras
        assert set(config.npuctl_requires) <= set(extras["families"])
    drifted = tmp_path / "pyproject.toml"
    drifted.write_text(text.replace("families = [", 'families = ["more>=1", '))
    with pytest.raises(BuildError, match=r"families' extras do not match .*make drivers-data"):
        npuctl_drivers.check(project=drifted)


def test_npuctl_reads_the_same_driver_the_package_is_built_from():
    for name in package_names():
        config = load_package(name)
        driver = next(d for d in npuctl_side.all_drivers() if d.package == name)
        if not config.alternative_to:
            assert npuctl_side.for_platform(config.npuctl_platform) == driver
        assert driver.alternative_to == config.alternative_to
        assert (driver.package, driver.module, driver.platform_driver) == (
            config.name,
            config.module,
            config.platform_driver,
        )
        assert driver.device_node == config.device["node"]
        assert driver.python_requires == config.npuctl_requires
        assert driver.board_files == tuple(f.installed_path for f in config.board_files)


def test_every_board_file_has_one_owner():
    owned = {f.source for name in package_names() for f in load_package(name).board_files}
    # A package's own board files, or those of the soc its description names.
    # and the trial guard every driver package ships.
    owners = {
        *package_names(),
        *(path.stem for path in SOCS_DIR.glob("*.yaml")),
        MODULE_TRIAL_DIR.name,
    }
    for name in owners:
        if not (PROVISION_DIR / name).is_dir():
            continue
        present = {path for path in (PROVISION_DIR / name).iterdir() if path.is_file()}
        assert present == {path for path in owned if path.parent.name == name}
    # The site files of 'npuctl provision': the shared folder's and each family's, each file
    # listed once, each action in one folder.
    from npuctl.provision.site_files import folders

    actions: list[str] = []
    for folder in map(Path, map(str, folders())):
        table = yaml.safe_load((folder / "files.yaml").read_text())
        actions += list(table)
        listed = [item["file"] for entries in table.values() for item in entries]
        assert len(listed) == len(set(listed))
        site = {path.name for path in folder.iterdir() if path.is_file()} - {"files.yaml"}
        assert site == set(listed), folder
    assert len(actions) == len(set(actions)) and {"nfd", "backports", "ld-path"} <= set(actions)
    # The one folder more: the npuctl-serve package's unit (tools/pipeline/npuctl_package.py).
    from pipeline.npuctl_package import SERVE_UNIT

    folders = {path.name for path in PROVISION_DIR.iterdir() if path.is_dir()}
    assert folders <= {*owners, "npuctl", SERVE_UNIT.parent.name}
    assert {"npuctl", SERVE_UNIT.parent.name} <= folders
    assert [p.name for p in SERVE_UNIT.parent.iterdir()] == [SERVE_UNIT.name]


def test_two_driver_lines_of_one_family_ship_their_board_files_under_their_own_names():
    alternatives = [name for name in package_names() if load_package(name).alternative_to]
    assert alternatives, "no family has two driver lines"
    for name in alternatives:
        config = load_package(name)
        other = load_package(config.alternative_to)
        assert config.npuctl_platform == other.npuctl_platform
        # The same rules, rendered for each package, each under the package's own name.
        assert [f.source for f in config.board_files] == [f.source for f in other.board_files]
        assert all(
            name in f.installed_path and other.name not in f.installed_path
            for f in config.board_files
        )
        # One replaces the other, in both directions.
        assert other.name in config.takes_over and name in other.takes_over
