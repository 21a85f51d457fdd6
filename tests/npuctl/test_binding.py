"""The NOE binding against the libnoe test double: layouts, ids, guards, errors."""

import ctypes
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

from npuctl.errors import InputError, ModelError, NpuError
from npuctl.platforms.zhouyi.noe import abi
from npuctl.platforms.zhouyi.noe.binding import (
    NoeLibrary,
    Session,
    TensorInfo,
    dequantize,
    quantize,
)
from npuctl.platforms.zhouyi.noe.isolation import probe_model

from .conftest import write_model


@pytest.fixture
def env(board, monkeypatch):
    for key, value in board.env.items():
        if key.startswith("NOE_DOUBLE_"):
            monkeypatch.setenv(key, value)
    monkeypatch.delenv("NOE_DOUBLE_FAIL", raising=False)
    return board


@pytest.mark.parametrize(
    ("structure", "size"),
    [
        (abi.TensorDesc, 20),
        (abi.JobConfigNpu, 32),
        (abi.JobConfig, 8),
        (abi.GraphConfigNpu, 32),
        (abi.GraphConfig, 8),
        (abi.DriverVersion, 32),
        (abi.ContextHandle, 4),
    ],
)
def test_struct_layouts_match_the_abi(structure, size):
    assert ctypes.sizeof(structure) == size


def test_tensor_desc_field_offsets():
    assert [
        getattr(abi.TensorDesc, f).offset
        for f in ("id", "size", "scale", "zero_point", "data_type")
    ] == [0, 4, 8, 12, 16]
    assert abi.JobConfigNpu.dynshape.offset == 24
    assert abi.DriverVersion.kmd_version.offset == 16


def test_data_types_are_the_real_enum():
    assert abi.numpy_dtype(3) == np.int8  # S8 (the guides say 1)
    assert abi.numpy_dtype(5) == np.int16  # S16 (the guides say 3)
    assert abi.numpy_dtype(1) == np.bool_
    assert abi.numpy_dtype(0xA) == np.float16
    with pytest.raises(ValueError, match="0x13"):
        abi.numpy_dtype(0x13)


def test_quantization_convention():
    info = TensorInfo(0, 0, 1, 64.75, 12, abi.DataType.U8)
    assert quantize(np.array([1.0]), info)[0] == 53  # round(64.75 - 12)
    assert dequantize(np.array([53], dtype=np.uint8), info)[0] == pytest.approx(1.0039, 1e-4)
    assert quantize(np.array([100.0, -100.0]), info).tolist() == [255, 0]  # clipped
    signed = TensorInfo(0, 0, 1, 27.67, 60, abi.DataType.S8)
    assert dequantize(np.array([-60], dtype=np.int8), signed)[0] == 0.0


def test_status_names_and_own_messages():
    assert abi.status_name(0x23) == "NOE_STATUS_ERROR_TIMEOUT"
    assert abi.status_name(0x11) == "NOE_STATUS_ERROR_JOB_EXCEPTION"
    assert abi.status_name(0x2B) == "NOE_STATUS_0x2B"
    assert abi.status_text(0x25)  # the library has no text for it


def test_no_device_is_a_clear_error_not_a_crash(env, monkeypatch, tmp_path):
    monkeypatch.setenv("NOE_DOUBLE_DEVICE", str(tmp_path / "no-such-device"))
    with pytest.raises(NpuError, match="OPEN_DEV_FAIL") as raised:
        Session(NoeLibrary(env.library)).open()
    assert "insmod" in str(raised.value) or "aipu" in str(raised.value)


def test_missing_library_says_what_to_install(tmp_path):
    with pytest.raises(NpuError, match="cix-noe-umd"):
        NoeLibrary(tmp_path / "libnoe.so")


def test_facts_ids_and_strings_without_nul(env, monkeypatch):
    monkeypatch.setenv("NOE_DOUBLE_KMD", "5.11.0-0123456789")  # 17 chars: no NUL in 16
    model = write_model(env.models / "m.cix", ["S32 308 1.0 0"], ["S8 512 27.67 60"])
    with Session(NoeLibrary(env.library)) as npu:
        assert npu.target() == "X2_1204MP3"
        assert npu.topology() == {"partitions": 1, "clusters": 1, "cores": 3}
        assert npu.versions() == {"umd": "0.6.0", "kmd": "5.11.0-012345678"}
        with npu.graph(model) as graph:
            assert graph.id > 0xFFFFFFFF
            assert [i.count for i in graph.inputs] == [77]
            assert graph.outputs[0].dtype == np.int8
            with graph.job() as job:
                assert job.id >> 32 == graph.id >> 32


def test_inference_data_flow_is_deterministic(env):
    model = write_model(env.models / "m.cix", ["S32 308 1.0 0"], ["S8 512 27.67 60"])
    with Session(NoeLibrary(env.library)) as npu, npu.graph(model) as graph:

        def infer(tokens):
            with graph.job() as job:
                job.load(0, np.array(tokens, dtype=np.int32))
                job.infer(1000)
                return job.output(0)

        first = infer(range(77))
        assert np.array_equal(first, infer(range(77)))
        assert not np.array_equal(first, infer(range(1, 78)))


def test_wrong_input_size_is_rejected_before_the_library(env):
    model = write_model(env.models / "m.cix", ["S32 308 1.0 0"], ["S8 512 27.67 60"])
    with (
        Session(NoeLibrary(env.library)) as npu,
        npu.graph(model) as graph,
        graph.job() as job,
        pytest.raises(InputError, match="308"),
    ):
        job.load(0, np.zeros(76, dtype=np.int32))


@pytest.mark.parametrize(
    ("failure", "pattern"),
    [("infer=0x23", "TIMEOUT"), ("infer=0x11", "JOB_EXCEPTION"), ("job=0x16", "BUF_ALLOC")],
)
def test_library_failures_raise_with_status_name(env, monkeypatch, failure, pattern):
    monkeypatch.setenv("NOE_DOUBLE_FAIL", failure)
    model = write_model(env.models / "m.cix", ["S32 308 1.0 0"], ["S8 512 27.67 60"])
    with (
        Session(NoeLibrary(env.library)) as npu,
        npu.graph(model) as graph,
        pytest.raises(NpuError, match=pattern) as raised,
        graph.job() as job,
    ):
        job.load(0, np.zeros(77, dtype=np.int32))
        job.infer(100)
    assert raised.value.status in (0x23, 0x11, 0x16)


def test_invalid_graph_is_a_model_error(env, monkeypatch):
    monkeypatch.setenv("NOE_DOUBLE_FAIL", "load=9")
    model = write_model(env.models / "m.cix", ["S32 308 1.0 0"], ["S8 512 27.67 60"])
    with (
        Session(NoeLibrary(env.library)) as npu,
        pytest.raises(ModelError, match="INVALID_GBIN"),
        npu.graph(model),
    ):
        pass


def test_context_is_deinitialised_exactly_once_on_error(env):
    with pytest.raises(RuntimeError), Session(NoeLibrary(env.library)) as npu:
        npu.close()
        raise RuntimeError("boom")
    assert env.calls().count("deinit") == 1
    assert env.calls().count("init") == 1


def test_serialised_access_from_threads(env):
    """The double aborts the process on a concurrent call; the binding's lock prevents it."""
    model = write_model(env.models / "m.cix", ["S32 308 1.0 0"], ["S8 512 27.67 60"])
    errors = []
    with Session(NoeLibrary(env.library)) as npu, npu.graph(model) as graph:

        def worker():
            try:
                for _ in range(50):
                    with graph.job() as job:
                        job.load(0, np.zeros(77, dtype=np.int32))
                        job.infer(100)
                        job.output(0)
            except Exception as error:  # pragma: no cover - reported below
                errors.append(error)

        threads = [threading.Thread(target=worker) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert errors == []


def _run_python(code: str, env) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=60,
    )


def test_double_crashes_on_null_job_config_like_the_real_library(board):
    model = board.clip_text()
    code = f"""
        import ctypes
        lib = ctypes.CDLL({str(board.library)!r})
        ctx = ctypes.c_void_p()
        assert lib.noe_init_context(ctypes.byref(ctx)) == 0
        graph = ctypes.c_uint64()
        assert lib.noe_load_graph(ctx, {str(model).encode()!r}, ctypes.byref(graph), None) == 0
        job = ctypes.c_uint64()
        lib.noe_create_job(ctx, graph, ctypes.byref(job), None)
        print("survived")
    """
    result = _run_python(code, board.env)
    assert result.returncode == -11, result.stdout + result.stderr
    assert "survived" not in result.stdout


def test_binding_silences_umd_log_lines(board):
    code = f"""
        import numpy as np
        from npuctl.platforms.zhouyi.noe.binding import NoeLibrary, Session
        try:
            with Session(NoeLibrary({str(board.library)!r})) as npu:
                npu.graph  # opened fine
                raise SystemExit(0)
        except Exception as error:
            print("error", error)
    """
    env = {**board.env, "NOE_DOUBLE_FAIL": "init=0x4"}
    result = _run_python(code, env)
    assert "[UMD ERR]" not in result.stdout
    assert "DEV_ABNORMAL" in result.stdout


def test_malformed_model_crash_is_contained_in_a_child(board, monkeypatch):
    for key, value in board.env.items():
        monkeypatch.setenv(key, value)
    broken = board.models / "broken.cix"
    broken.write_bytes(b"\x00garbage that is no graph binary")
    with pytest.raises(ModelError, match="SIGSEGV"):
        probe_model(board.library, broken)
    good = board.clip_text()
    tensors = probe_model(board.library, good)
    assert tensors["inputs"][0]["elements"] == 77
