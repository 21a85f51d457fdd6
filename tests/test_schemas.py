"""Every description of the tree (dkms/, images/, emulation/, the model manifests) has a JSON
Schema its loader checks it against: the tree's own pass, and a wrong field is one line that
names the file, the field and what is allowed there."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from jsonschema import Draft202012Validator

from oci_image.definition import IMAGES_DIR, image_names, load
from oci_image.errors import ImageError
from pipeline import schema
from pipeline.config import PACKAGE_SCHEMA, load_config, package_names, with_soc
from pipeline.errors import BuildError, ExitCode
from rocket_emu import pins
from rocket_emu.errors import EmulationError

REPO = Path(__file__).resolve().parents[1]
MANIFEST_SCHEMA = REPO / "npuctl/src/npuctl/models/manifest.schema.json"
SCHEMAS = [PACKAGE_SCHEMA, IMAGES_DIR / "image.schema.json", pins.SCHEMA, MANIFEST_SCHEMA]


@pytest.mark.parametrize("path", SCHEMAS, ids=lambda path: path.name)
def test_each_schema_is_a_valid_json_schema(path: Path) -> None:
    Draft202012Validator.check_schema(json.loads(path.read_text()))


def test_every_description_of_the_tree_passes_its_schema() -> None:
    for name in package_names():
        assert (
            schema.problem(
                with_soc(yaml.safe_load((path := REPO / f"dkms/{name}.yaml").read_text()), path),
                PACKAGE_SCHEMA,
            )
            is None
        )
    for name in image_names():
        assert load(name).name == name
    assert pins.load().release
    for manifest in REPO.glob("npuctl/src/npuctl/platforms/*/models.yaml"):
        assert schema.problem(yaml.safe_load(manifest.read_text()), MANIFEST_SCHEMA) is None


def _edited(tmp_path: Path, source: Path, edit) -> Path:
    """A copy of the description, its soc's sections in it, edited."""
    data = with_soc(yaml.safe_load(source.read_text()), source)
    edit(data)
    target = tmp_path / source.name
    target.write_text(yaml.safe_dump(data))
    return target


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (lambda d: d["kernel"].update(min="6"), "kernel.min: '6' is not MAJOR.MINOR"),
        (lambda d: d["package"].pop("module"), "package.module: missing: add it"),
        (lambda d: d["package"].update(moduel="x"), "package.moduel: not a field here (known: "),
        (lambda d: d["device"].update(mode=660), "device.mode: 660 is not of type 'string'"),
        (
            lambda d: d["package"].update(takes_over=["Not A Package"]),
            "package.takes_over.0: 'Not A Package' is not a Debian package name",
        ),
        (lambda d: d["upstream"].update(paths=["x"]), "upstream: must be a git subtree"),
        (
            lambda d: d["firmware"].update(acpi_ids=["cixh4000"]),
            "firmware.acpi_ids.0: 'cixh4000' does not match",
        ),
    ],
)
def test_a_wrong_driver_description_is_one_line_naming_file_and_field(
    tmp_path: Path, edit, expected: str
) -> None:
    broken = _edited(tmp_path, REPO / "dkms/aipu-dkms.yaml", edit)
    with pytest.raises(BuildError) as raised:
        load_config(broken)
    message = str(raised.value)
    assert raised.value.code == ExitCode.USAGE
    assert message.startswith(f"{broken}: {expected}"), message
    assert "\n" not in message


def test_a_wrong_image_description_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "npuctl.requirements.txt").write_text("")
    _edited(tmp_path, IMAGES_DIR / "npuctl.yaml", lambda d: d.update(architectures=["riscv64"]))
    with pytest.raises(ImageError) as raised:
        load("npuctl", tmp_path)
    assert str(raised.value) == (
        f"{tmp_path / 'npuctl.yaml'}: architectures.0: 'riscv64' is not one of ['arm64', 'amd64']"
    )


def test_wrong_emulator_pins_are_one_line(tmp_path: Path) -> None:
    broken = _edited(tmp_path, pins.PINS, lambda d: d["emulator"].update(commit="main"))
    with pytest.raises(EmulationError) as raised:
        pins.load(broken)
    assert str(raised.value) == (
        f"inputs: {broken}: emulator.commit: 'main' is not 40 lowercase hex digits"
    )
    broken = _edited(tmp_path, pins.PINS, lambda d: d["golden_cases"][0].update(expect="differs"))
    with pytest.raises(EmulationError) as raised:
        pins.load(broken)
    case, teflon = pins.load().data["golden_cases"][0]["name"], pins.load().teflon_versions[0]
    assert str(raised.value).endswith(
        f"golden case {case}: differs under {teflon} without 'observed'"
    )
    broken = _edited(
        tmp_path, pins.PINS, lambda d: d["golden_cases"][0].update(expect={teflon: "agree"})
    )
    with pytest.raises(EmulationError, match=f"golden case {case}: expect names"):
        pins.load(broken)


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (lambda d: d["models"]["clip-text"].pop("url"), "models.clip-text.url: missing: add it"),
        (
            lambda d: d["models"]["clip-text"].update(sha256="abc"),
            "models.clip-text.sha256: 'abc' is not 64 lowercase hex digits, or null",
        ),
        (
            lambda d: d["models"]["clip-text"]["inputs"][0].update(elements="77"),
            "models.clip-text.inputs.0.elements: '77' is not of type 'integer'",
        ),
        (lambda d: d.update(schema=2), "schema: 1 was expected"),
    ],
)
def test_a_wrong_model_manifest_is_one_line_and_exit_2(tmp_path: Path, edit, expected) -> None:
    """As a user meets it: npuctl models list with NPUCTL_MANIFEST naming the file."""
    manifest = _edited(tmp_path, REPO / "npuctl/src/npuctl/platforms/zhouyi/models.yaml", edit)
    result = subprocess.run(
        [sys.executable, "-m", "npuctl", "models", "list"],
        capture_output=True,
        text=True,
        env={**os.environ, "NPUCTL_MANIFEST": str(manifest), "NPUCTL_MODELS": str(tmp_path)},
        check=False,
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr == f"npuctl: error: the model manifest {manifest}: {expected}\n"
