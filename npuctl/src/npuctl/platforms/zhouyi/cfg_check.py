"""npuctl cfg check: a CixBuilder config read the way the tool reads it (configparser), and
every trap the rules file knows reported with its line and fix, before an hour of compiling
finds it. Calibration data is opened with numpy without pickle support: a file that needs
pickle is refused, never loaded."""

from __future__ import annotations

import configparser
import difflib
import re
import zipfile
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from npuctl.doctor.findings import Finding, Report, Status
from npuctl.errors import InputError

PATH_KEYS = {("Parser", "input_model"), ("Optimizer", "data"), ("Optimizer", "calibration_data")}


@dataclass(frozen=True)
class Rules:
    sections: dict[str, dict[str, list[str]]]
    traps: list[dict[str, str]]
    targets: dict[str, Any]
    datasets: list[str]
    onnx: dict[str, Any]
    sources: dict[str, str]
    max_config_bytes: int


def load_rules() -> Rules:
    data = yaml.safe_load(
        (resources.files(__package__) / "cixbuilder_rules.yaml").read_text(encoding="utf-8")
    )
    return Rules(
        data["sections"],
        data["traps"],
        data["targets"],
        data["datasets"],
        data["onnx"],
        data["sources"],
        int(data["limits"]["max_config_bytes"]),
    )


def _lines(text: str) -> dict[tuple[str, str], int]:
    """(section, lower-case key) -> line number; (section, "") for the section header."""
    where: dict[tuple[str, str], int] = {}
    section = ""
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        header = re.match(r"^\[([^\]]+)\]", stripped)
        if header:
            section = header[1].strip()
            where.setdefault((section, ""), number)
        elif stripped and stripped[0] not in "#;" and re.match(r"^[^=:]+[=:]", stripped):
            key = re.split(r"[=:]", stripped, maxsplit=1)[0].strip().lower()
            where.setdefault((section, key), number)
    return where


def read_config(path: Path, rules: Rules) -> tuple[configparser.ConfigParser, str]:
    try:
        size = path.stat().st_size
    except OSError as error:
        raise InputError(f"cannot read {path}: {error.strerror}") from error
    if not path.is_file():
        raise InputError(f"{path} is not a file")
    if size > rules.max_config_bytes:
        raise InputError(
            f"{path} is {size} bytes: a CixBuilder config is a few lines, not "
            f"{size // 1048576} MB (is it the right file?)"
        )
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(f"{path} is not text (not UTF-8): is it the .cfg file?") from None
    except OSError as error:
        raise InputError(f"cannot read {path}: {error.strerror}") from error
    if "\0" in text:
        raise InputError(f"{path} is binary, not a CixBuilder config")
    parser = configparser.ConfigParser(
        comment_prefixes=("#", ";"),
        inline_comment_prefixes=("#", ";"),
        strict=False,
        interpolation=None,
    )
    try:
        parser.read_string(text, source=str(path))
    except configparser.MissingSectionHeaderError:
        raise InputError(
            f"{path} has no [section] before its first line: it is not a CixBuilder config"
        ) from None
    except configparser.Error as error:
        message = " ".join(str(error).split())
        raise InputError(f"{path} is not a CixBuilder config: {message}") from None
    if not parser.sections():
        raise InputError(f"{path} has no [section]: it is not a CixBuilder config")
    return parser, text


class Checker:
    def __init__(self, path: Path, rules: Rules | None = None) -> None:
        self.path = path
        self.rules = rules or load_rules()
        self.config, text = read_config(path, self.rules)
        self.where = _lines(text)
        self.report = Report()
        self.report.facts.update({"config": str(path)})

    def line(self, section: str, key: str = "") -> str:
        number = self.where.get((section, key.lower()))
        return f"{self.path.name}:{number}" if number else self.path.name

    def add(
        self, status: Status, finding_id: str, section: str, key: str, summary: str, fix: str
    ) -> None:
        where = self.line(section, key)
        self.report.add(Finding(finding_id, "cfg", status, f"{where}: {summary}", fix=fix or None))

    def run(self) -> Report:
        self._sections()
        self._target()
        self._dataset()
        paths = self._paths()
        shapes = self._input_shape()
        self._calibration(paths.get(("Optimizer", "calibration_data")), shapes)
        self._onnx(paths.get(("Parser", "input_model")))
        if not any(f.status in (Status.FAIL, Status.WARN) for f in self.report.findings):
            self.report.add(Finding("cfg.ok", "cfg", Status.OK, f"{self.path.name}: no trap found"))
        return self.report

    def _sections(self) -> None:
        known = self.rules.sections
        for section in self.config.sections():
            if section not in known:
                guess = difflib.get_close_matches(section, list(known), n=1, cutoff=0.5)
                hint = f"did you mean [{guess[0]}]?" if guess else f"known: {', '.join(known)}"
                self.add(
                    Status.FAIL,
                    f"cfg.section.{section}",
                    section,
                    "",
                    f"unknown section [{section}]",
                    hint,
                )
                continue
            traps = {t["key"]: t for t in self.rules.traps if t["section"] in (section, "*")}
            for key in self.config[section]:
                if key in traps:
                    trap = traps[key]
                    self.add(
                        Status.FAIL,
                        f"cfg.trap.{section}.{key}",
                        section,
                        key,
                        f"[{section}] {key}: {trap['why']}",
                        f"write {trap['fix']}" if " " not in trap["fix"] else trap["fix"],
                    )
                elif key not in known[section]["keys"]:
                    guess = difflib.get_close_matches(key, known[section]["keys"], n=1)
                    self.add(
                        Status.WARN,
                        f"cfg.key.{section}.{key}",
                        section,
                        key,
                        f"[{section}] {key} is not an option CixBuilder is known to read",
                        f"did you mean {guess[0]}?" if guess else "check the option's name",
                    )
        for section, spec in known.items():
            if section not in self.config:
                if section != "Common":
                    self.add(
                        Status.FAIL,
                        f"cfg.missing.{section}",
                        section,
                        "",
                        f"no [{section}] section",
                        f"add [{section}] with {', '.join(spec['required'])}",
                    )
                continue
            for key in spec["required"]:
                if key not in self.config[section]:
                    explained = any(
                        t["fix"] == key and t["key"] in self.config[section]
                        for t in self.rules.traps
                    )
                    if not explained:
                        self.add(
                            Status.FAIL,
                            f"cfg.missing.{section}.{key}",
                            section,
                            "",
                            f"[{section}] has no {key}"
                            + (" (CixBuilder stops with KeyError)" if key == "model_name" else ""),
                            f"add {key} = ... to [{section}]",
                        )

    def _target(self) -> None:
        if "GBuilder" not in self.config or "target" not in self.config["GBuilder"]:
            return
        target = self.config["GBuilder"]["target"].strip()
        works, fails = self.rules.targets["works"], self.rules.targets["fails"]
        if target in works:
            return
        if target in fails:
            self.add(
                Status.FAIL,
                "cfg.target",
                "GBuilder",
                "target",
                f"target {target} {fails[target].split(';')[0]}",
                "target = X2_1204",
            )
        else:
            self.add(
                Status.WARN,
                "cfg.target",
                "GBuilder",
                "target",
                f"target {target} is not one the Z3 is known to run ({', '.join(works)})",
                "target = X2_1204",
            )

    def _dataset(self) -> None:
        if "Optimizer" not in self.config or "dataset" not in self.config["Optimizer"]:
            return
        dataset = self.config["Optimizer"]["dataset"].strip()
        if dataset.lower() not in self.rules.datasets:
            self.add(
                Status.WARN,
                "cfg.dataset",
                "Optimizer",
                "dataset",
                f"dataset {dataset} is not a built-in dataset CixBuilder is known to have",
                f"dataset = {self.rules.datasets[-1]} (calibration data in an .npz)",
            )

    def _paths(self) -> dict[tuple[str, str], Path]:
        found = {}
        for section, key in sorted(PATH_KEYS):
            if section not in self.config or key not in self.config[section]:
                continue
            value = self.config[section][key].strip()
            path = Path(value)
            resolved = path if path.is_absolute() else (self.path.parent / path)
            if not resolved.exists():
                relative = "" if path.is_absolute() else f" (relative to {self.path.parent})"
                self.add(
                    Status.FAIL,
                    f"cfg.path.{section}.{key}",
                    section,
                    key,
                    f"[{section}] {key}: {value} does not exist{relative}",
                    "fix the path; relative paths start at the config's folder",
                )
                continue
            found[(section, key)] = resolved
        return found

    def _input_shape(self) -> list[list[int]] | None:
        if "Parser" not in self.config or "input_shape" not in self.config["Parser"]:
            return None
        text = self.config["Parser"]["input_shape"]
        shapes: list[list[int]] = []
        for group in re.findall(r"\[([^\[\]]*)\]", text) or [text]:
            sizes = [item.strip() for item in group.split(",") if item.strip()]
            if not all(re.fullmatch(r"\d+", size) and int(size) > 0 for size in sizes):
                self.add(
                    Status.FAIL,
                    "cfg.input_shape",
                    "Parser",
                    "input_shape",
                    f"input_shape {text.strip()} is not static: the NPU needs fixed sizes",
                    "export the model with fixed dimensions and write them all, e.g. "
                    "[1, 3, 224, 224]",
                )
                return None
            shapes.append([int(size) for size in sizes])
        return shapes

    def _calibration(self, path: Path | None, shapes: list[list[int]] | None) -> None:
        if path is None:
            return
        try:
            arrays = _load_calibration(path)
        except ValueError as error:
            self.add(
                Status.FAIL,
                "cfg.calibration",
                "Optimizer",
                "calibration_data",
                f"calibration data {path.name}: {error}",
                "save it with numpy.savez(file, input0=..., input1=...) from plain arrays",
            )
            return
        if path.suffix == ".npz":
            expected = [f"input{index}" for index in range(len(arrays))]
            if sorted(arrays) != sorted(expected):
                self.add(
                    Status.FAIL,
                    "cfg.calibration.keys",
                    "Optimizer",
                    "calibration_data",
                    f"calibration data {path.name} has keys {', '.join(sorted(arrays))}; "
                    f"CixBuilder reads {', '.join(expected)}",
                    "name the arrays input0, input1, ... in the model's input order",
                )
                return
        names = sorted(arrays, key=lambda name: int(name[5:]) if name[5:].isdigit() else 0)
        if shapes is not None and len(shapes) != len(names):
            self.add(
                Status.FAIL,
                "cfg.calibration.count",
                "Optimizer",
                "calibration_data",
                f"calibration data has {len(names)} inputs, input_shape {len(shapes)}",
                "one array per model input",
            )
            return
        for index, name in enumerate(names):
            array = arrays[name]
            if array.dtype.kind not in "fiu":
                self.add(
                    Status.FAIL,
                    "cfg.calibration.dtype",
                    "Optimizer",
                    "calibration_data",
                    f"calibration {name} has dtype {array.dtype}, not numbers",
                    "float32 for images, int32 for token ids",
                )
            elif array.dtype == np.int64:
                self.add(
                    Status.WARN,
                    "cfg.calibration.dtype",
                    "Optimizer",
                    "calibration_data",
                    f"calibration {name} is int64: CixBuilder converts it to int32",
                    "save token ids as int32",
                )
            if shapes is not None and list(array.shape[1:]) != shapes[index]:
                self.add(
                    Status.FAIL,
                    "cfg.calibration.shape",
                    "Optimizer",
                    "calibration_data",
                    f"calibration {name} has shape {list(array.shape)}, expected "
                    f"[N, {', '.join(str(s) for s in shapes[index])}]",
                    "stack N samples of input_shape along a new first axis",
                )

    def _onnx(self, model: Path | None) -> None:
        if model is None or model.suffix.lower() != ".onnx":
            return
        try:
            import onnx
        except ImportError:
            self.report.add(
                Finding(
                    "cfg.onnx",
                    "cfg",
                    Status.INFO,
                    "ONNX operators not checked (install python3-onnx for the deeper check)",
                )
            )
            return
        try:
            graph = onnx.load(str(model), load_external_data=False).graph
        except Exception as error:  # the onnx package's own words
            self.add(
                Status.FAIL,
                "cfg.onnx",
                "Parser",
                "input_model",
                f"{model.name} is not a readable ONNX model: {error}",
                "export it again",
            )
            return
        ops = {node.op_type for node in graph.node}
        unsupported = sorted(ops & set(self.rules.onnx["unsupported"]))
        if unsupported:
            self.add(
                Status.WARN,
                "cfg.onnx.unsupported",
                "Parser",
                "input_model",
                f"{model.name} uses {', '.join(unsupported)}, which the Z3 cannot run "
                "(attention masks)",
                "remove the mask subgraph (constant mask) before compiling",
            )
        attention = any("attention" in node.name.lower() for node in graph.node)
        if attention and ops & set(self.rules.onnx["attention"]):
            self.add(
                Status.WARN,
                "cfg.onnx.transformer",
                "Parser",
                "input_model",
                f"{model.name} is a transformer: {self.rules.onnx['transformer_warning']}",
                "use the CLIP text encoder (npuctl run clip-text) for text embeddings",
            )


def _load_calibration(path: Path) -> dict[str, np.ndarray]:
    """The arrays, loaded without pickle; ValueError with the reason otherwise."""
    if path.suffix not in (".npy", ".npz"):
        raise ValueError("is neither .npy nor .npz")
    try:
        if path.suffix == ".npy":
            return {"input0": np.load(path, allow_pickle=False)}
        if not zipfile.is_zipfile(path):
            raise ValueError("is not an .npz archive")
        with np.load(path, allow_pickle=False) as archive:
            return {name: archive[name] for name in archive.files}
    except ValueError as error:
        if "pickle" in str(error).lower():
            raise ValueError("holds Python objects (pickle): refused, never loaded") from None
        raise ValueError(f"is not readable numpy data: {error}") from None
    except (OSError, EOFError, zipfile.BadZipFile) as error:
        raise ValueError(f"is not readable numpy data: {error}") from None
