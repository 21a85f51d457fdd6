"""npuctl cfg check on a corpus of CixBuilder configs written here: each known trap with its
line and fix, the guide's example made right, and unusual but valid configs (comments, case,
spacing, ':' separators) that must raise no alarm. Bad files are one line and exit 3; an
.npz that needs pickle is refused without being loaded."""

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from .test_cli_run import one_line_error

GOOD = """\
[Common]
mode = build

[Parser]
input_model = model.onnx      # Key is "input_model", NOT "model_path"
model_type = onnx
model_name = my-model                   # Required
input_shape = [1, 77]
output = output_tensor_name
output_dir = ./out

[Optimizer]
dataset = numpymultiinputdataset        # Must be a built-in dataset name
calibration_data = calib.npz            # .npz for multi-input models
calibration_batch_size = 1
output_dir = ./out

[GBuilder]
target = X2_1204
outputs = ./out/model.cix               # Key is "outputs" (plural)
"""


def npuctl(*args, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "npuctl", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=cwd,
    )


@pytest.fixture
def folder(tmp_path):
    (tmp_path / "model.onnx").write_bytes(b"")
    np.savez(tmp_path / "calib.npz", input0=np.zeros((4, 1, 77), np.int32))
    return tmp_path


def check(folder, text, name="model.cfg"):
    path = folder / name
    path.write_text(textwrap.dedent(text))
    result = npuctl("cfg", "check", "--json", str(path))
    assert "Traceback" not in result.stderr, result.stderr
    document = json.loads(result.stdout)
    assert document["schema"] == "npuctl-cfg-check/1"
    assert document["exit_code"] == result.returncode
    return result.returncode, [c for c in document["checks"] if c["status"] != "info"]


def test_the_guides_example_made_right_passes(folder):
    code, checks = check(folder, GOOD)
    assert code == 0, checks
    assert [c["id"] for c in checks] == ["cfg.ok"]


@pytest.mark.parametrize(
    "text",
    [
        GOOD.replace(" = ", "=").replace("#", ";"),  # no spaces, ';' comments
        GOOD.replace("Input_Model", "input_model").replace("input_model", "INPUT_MODEL"),
        GOOD.replace(" = ", ": "),  # ':' separators
        "# a comment first\n\n" + GOOD.replace("[GBuilder]", "\n\n[GBuilder]  "),
        GOOD.replace("target = X2_1204", "target = X2_1204MP3   ; as the hub's models"),
    ],
    ids=["compact", "upper-case-key", "colons", "blank-lines", "mp3-target"],
)
def test_unusual_but_valid_configs_raise_no_alarm(folder, text):
    code, checks = check(folder, text)
    assert code == 0, checks


TRAPS = [
    (
        "input_model = model.onnx",
        "model_path = model.onnx",
        "cfg.trap.Parser.model_path",
        "write input_model",
        5,
    ),
    ("model_name = my-model", "", "cfg.missing.Parser.model_name", "add model_name", 4),
    (
        "output = output_tensor_name",
        "outputs = output_tensor_name",
        "cfg.trap.Parser.outputs",
        "write output",
        9,
    ),
    (
        "outputs = ./out/model.cix",
        "outputs = ./out/model.cix\noutput_dir = ./out",
        "cfg.trap.GBuilder.output_dir",
        "remove it",
        21,
    ),
    ("target = X2_1204", "target = Z3_1204", "cfg.target", "target = X2_1204", 19),
    ("target = X2_1204", "target = Z3", "cfg.target", "target = X2_1204", 19),
    ("input_shape = [1, 77]", "input_shape = [-1, 77]", "cfg.input_shape", "fixed", 8),
    (
        "input_model = model.onnx",
        "input_model = missing.onnx",
        "cfg.path.Parser.input_model",
        "relative paths start at the config's folder",
        5,
    ),
    ("[GBuilder]", "[Gbuilder]", "cfg.section.Gbuilder", "did you mean [GBuilder]?", 18),
]


@pytest.mark.parametrize(
    ("old", "new", "finding", "fix", "line"), TRAPS, ids=[t[2] + t[1][-6:] for t in TRAPS]
)
def test_each_trap_is_found_with_its_line_and_fix(folder, old, new, finding, fix, line):
    code, checks = check(folder, GOOD.replace(old, new))
    assert code == 11
    found = {c["id"]: c for c in checks}
    assert finding in found, checks
    assert found[finding]["status"] == "failure"
    assert found[finding]["summary"].startswith(f"model.cfg:{line}:"), found[finding]
    assert fix in found[finding]["fix"]


def test_an_unknown_option_is_a_warning_with_a_guess(folder):
    code, checks = check(
        folder, GOOD.replace("model_type = onnx", "model_typ = onnx\nmodel_type = onnx")
    )
    assert code == 10
    (warning,) = checks
    assert warning["fix"] == "did you mean model_type?"


@pytest.mark.parametrize(
    ("arrays", "finding", "words"),
    [
        ({"data": np.zeros((4, 1, 77), np.int32)}, "cfg.calibration.keys", "reads input0"),
        ({"input0": np.zeros((4, 1, 76), np.int32)}, "cfg.calibration.shape", "[N, 1, 77]"),
        (
            {"input0": np.zeros((4, 1, 77), np.int32), "input1": np.zeros((4, 3), np.int32)},
            "cfg.calibration.count",
            "2 inputs, input_shape 1",
        ),
    ],
)
def test_calibration_data_that_does_not_fit(folder, arrays, finding, words):
    np.savez(folder / "calib.npz", **arrays)
    code, checks = check(folder, GOOD)
    assert code == 11
    found = {c["id"]: c for c in checks}
    assert words in found[finding]["summary"], checks


def test_int64_token_ids_are_a_warning(folder):
    np.savez(folder / "calib.npz", input0=np.zeros((4, 1, 77), np.int64))
    code, checks = check(folder, GOOD)
    assert code == 10
    assert "converts it to int32" in checks[0]["summary"]


class Marker:
    """Unpickling this writes a file: proof that a pickle was loaded."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (str(self.path), "w"))


def test_a_pickle_bearing_npz_is_refused_and_never_loaded(folder):
    marker = folder / "unpickled"
    payload = np.empty(1, dtype=object)
    payload[0] = Marker(marker)
    np.savez(folder / "calib.npz", input0=payload)
    code, checks = check(folder, GOOD)
    assert code == 11
    assert "pickle): refused, never loaded" in checks[0]["summary"]
    assert not marker.exists()


def test_onnx_ops_the_z3_cannot_run(folder):
    onnx = pytest.importorskip("onnx", reason="the deeper check needs the onnx package")
    from onnx import TensorProto, helper

    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["q"], name="layer0/attention/query"),
        helper.make_node("Sub", ["q", "q"], ["m"], name="layer0/attention/mask_sub"),
        helper.make_node("Where", ["c", "m", "q"], ["y"], name="layer0/attention/mask"),
    ]
    tensor = helper.make_tensor_value_info
    graph = helper.make_graph(
        nodes,
        "encoder",
        [tensor("x", TensorProto.FLOAT, [1, 4]), tensor("c", TensorProto.BOOL, [1, 4])],
        [tensor("y", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor("w", TensorProto.FLOAT, [4, 4], [0.0] * 16)],
    )
    onnx.save(helper.make_model(graph), folder / "model.onnx")
    code, checks = check(folder, GOOD)
    assert code == 10
    found = {c["id"]: c for c in checks}
    assert "Sub, Where" in found["cfg.onnx.unsupported"]["summary"]
    assert "lose their meaning under INT8" in found["cfg.onnx.transformer"]["summary"]


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (b"just some notes\nnot a config\n", "has no [section]"),
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe", "is not text"),
        (b"[Parser]\nkey = 1\n[Parser\n", "is not a CixBuilder config"),
        (b"[Parser]\ninput_model\n", "is not a CixBuilder config"),
    ],
    ids=["prose", "binary", "broken-header", "no-value"],
)
def test_files_that_are_not_configs(tmp_path, content, words):
    path = tmp_path / "x.cfg"
    path.write_bytes(content)
    assert words in one_line_error(npuctl("cfg", "check", str(path)), 3)


def test_a_50_mb_file_is_refused_unread(tmp_path):
    path = tmp_path / "huge.cfg"
    with path.open("wb") as stream:
        stream.truncate(50 * 1024 * 1024)
    assert "a CixBuilder config is a few lines" in one_line_error(
        npuctl("cfg", "check", str(path)), 3
    )


def test_a_missing_file(tmp_path):
    assert "cannot read" in one_line_error(npuctl("cfg", "check", str(tmp_path / "no.cfg")), 3)


def test_human_output_has_the_line_and_fix(folder):
    (folder / "m.cfg").write_text(GOOD.replace("X2_1204", "Z3_1204"))
    result = npuctl("cfg", "check", str(folder / "m.cfg"))
    assert result.returncode == 11
    lines = result.stdout.splitlines()
    assert lines[0].startswith("[✗] m.cfg:19: target Z3_1204 fails at GBuilder")
    assert lines[1].strip() == "fix: target = X2_1204"
