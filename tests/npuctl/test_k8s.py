"""npuctl k8s render: manifests checked by a real schema validator that works offline
(kubernetes-validate, which carries the Kubernetes schemas), not by string matching; and
consistent with what the doctor labels and what the server answers."""

from __future__ import annotations

import importlib.metadata

import pytest
import yaml

from npuctl.doctor.nfd import NAMESPACE

from .conftest import Board

KUBERNETES = "1.31.0"  # a K3s release of 2025; the schemas are the validator's own


def rendered(board: Board, *args: str) -> list[dict]:
    result = board.npuctl("k8s", "render", *args)
    assert result.returncode == 0, result.stderr
    return [document for document in yaml.safe_load_all(result.stdout) if document]


def kubernetes_validate():
    """kubernetes-validate, or a skip where it cannot run: it needs jsonschema 4.18 or later
    (referencing), and the oldest run has Debian 12's 4.10.3, which npuctl supports."""
    version = importlib.metadata.version("jsonschema").split(".")
    if tuple(int(part) for part in version[:2]) < (4, 18):
        pytest.skip(
            f"kubernetes-validate needs jsonschema 4.18 or later; this run has {'.'.join(version)}"
        )
    return pytest.importorskip(
        "kubernetes_validate", reason="kubernetes-validate is a dev dependency: make deps"
    )


@pytest.mark.parametrize("device_via", ["cdi", "device-plugin"])
def test_manifests_validate_against_the_kubernetes_schemas(board: Board, device_via: str):
    validate = kubernetes_validate()
    documents = rendered(board, "--device-via", device_via, "--image", "registry.local/npuctl:1")
    kinds = [document["kind"] for document in documents]
    expected = ["DaemonSet", "Service"] + (["DaemonSet"] if device_via == "device-plugin" else [])
    assert kinds == expected
    for document in documents:
        validate.validate(document, KUBERNETES, strict=True)


def test_the_daemonset_runs_serve_where_the_doctor_says_healthy(board: Board):
    serve, service = rendered(board)
    pod = serve["spec"]["template"]
    assert pod["spec"]["nodeSelector"] == {
        f"{NAMESPACE}/npu-family": "zhouyi",
        f"{NAMESPACE}/npu-healthy": "true",
    }
    container = pod["spec"]["containers"][0]
    assert container["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
    assert container["livenessProbe"]["httpGet"]["path"] == "/health"
    assert pod["metadata"]["annotations"]["prometheus.io/path"] == "/metrics"
    assert pod["metadata"]["annotations"]["cdi.k8s.io/npuctl"] == "armchina.com/npu=0"
    assert container["args"][:2] == ["serve", "--host"]
    assert service["spec"]["selector"] == serve["spec"]["selector"]["matchLabels"]


def test_the_device_plugin_shares_one_npu_per_node(board: Board):
    serve, _, plugin = rendered(board, "--device-via", "device-plugin")
    limits = serve["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits["squat.ai/zhouyi-npu"] == 1
    args = plugin["spec"]["template"]["spec"]["containers"][0]["args"]
    device = yaml.safe_load(args[1])
    assert device == {
        "name": "zhouyi-npu",
        "groups": [{"paths": [{"path": "/dev/aipu"}], "count": 1}],
    }


def test_the_validator_refuses_a_broken_manifest(board: Board):
    validate = kubernetes_validate()
    serve = rendered(board)[0]
    serve["spec"]["template"]["spec"]["containers"][0]["imagePullPolicyy"] = "Always"
    with pytest.raises(validate.ValidationError):
        validate.validate(serve, KUBERNETES, strict=True)


def test_output_file_holds_what_the_command_prints(board: Board, tmp_path):
    target = tmp_path / "serve.yaml"
    result = board.npuctl("k8s", "render", "--output", str(target))
    assert result.returncode == 0
    assert list(yaml.safe_load_all(target.read_text())) == rendered(board)


def test_immich_reaches_the_zhouyi_pods_without_the_key_and_nothing_else_does(board: Board):
    """Immich's server sends no key: on the family that computes Immich's model, the pods open
    its routes (and only those, beside the probes); the RK3588's computes none and opens none."""
    from npuctl.serve.command import _public

    zhouyi = rendered(board)[0]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--api-key-file" in zhouyi
    opened = zhouyi[zhouyi.index("--public") + 1]
    assert _public(opened) == {"health", "openapi", "immich"}
    rocket = rendered(board, "--family", "rocket")[0]["spec"]["template"]["spec"]
    assert "--public" not in rocket["containers"][0]["args"]
    keyless = rendered(board, "--api-key-secret", "none")[0]["spec"]["template"]["spec"][
        "containers"
    ][0]
    assert "--public" not in keyless["args"]  # no key: every route is open already


def test_frigates_detector_port_opens_only_for_the_addresses_asked(board: Board):
    """--zmq-port opens Frigate's remote detector on the pods and the Service; with
    --zmq-from, a NetworkPolicy lets only those addresses reach it (the HTTP port stays
    open, behind its key); every document valid."""
    validate = kubernetes_validate()
    documents = rendered(board, "--zmq-port", "5555", "--zmq-from", "192.168.1.0/24")
    serve, service, policy = documents
    container = serve["spec"]["template"]["spec"]["containers"][0]
    assert container["args"][-2:] == ["--zmq", "tcp://*:5555"]
    assert {"name": "frigate", "containerPort": 5555} in container["ports"]
    assert {"name": "frigate", "port": 5555, "targetPort": "frigate"} in service["spec"]["ports"]
    assert policy["kind"] == "NetworkPolicy"
    rules = policy["spec"]["ingress"]
    assert rules[1] == {
        "from": [{"ipBlock": {"cidr": "192.168.1.0/24"}}],
        "ports": [{"port": 5555}],
    }
    assert rules[0] == {"ports": [{"port": 8340}]}
    for document in documents:
        validate.validate(document, KUBERNETES, strict=True)
    closed = rendered(board)
    assert "--zmq" not in closed[0]["spec"]["template"]["spec"]["containers"][0]["args"]
    open_to_all = board.npuctl("k8s", "render", "--zmq-port", "5555")
    assert open_to_all.returncode == 0
    assert "NetworkPolicy" not in open_to_all.stdout
    assert "takes frames from every address that reaches the Service" in open_to_all.stderr
