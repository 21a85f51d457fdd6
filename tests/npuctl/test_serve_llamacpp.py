"""npuctl serve as Frigate's semantic-search provider: Frigate's own llama.cpp client and
embedding adapter (frigate_genai.py) against the server on the libnoe double, and the edges
of llama.cpp's /embeddings, /props and /v1/models as a peer sends them."""

from __future__ import annotations

import base64
import io
import json
import re
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from testkit.serve_process import Server, start

from .conftest import Board
from .frigate_genai import FrigateClient, client_tree

KEY = "frigate-key-0123456789"
MODEL = "ViT-B-32__openai"
TEXTS = ["a person with a red umbrella", "a white car in the driveway"]


def jpeg(picture: Image.Image, **options) -> bytes:
    buffer = io.BytesIO()
    picture.save(buffer, format="JPEG", **options)
    return buffer.getvalue()


@pytest.fixture(scope="module")
def thumbnails(bus_jpg: Path) -> list[bytes]:
    """Thumbnails as Frigate stores them (small JPEGs of a tracked object's box)."""
    bus = Image.open(bus_jpg).convert("RGB")
    return [
        jpeg(bus.crop((0, 200, 810, 900)).resize((240, 208))),
        jpeg(bus.crop((50, 400, 300, 900)).resize((120, 240))),
    ]


@pytest.fixture
def key_file(tmp_path: Path) -> Path:
    path = tmp_path / "key"
    path.write_text(KEY + "\n")
    return path


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    return client_tree(tmp_path / "frigate")


def bearer(key: str = KEY) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}


def openai_vector(server: Server, text: str) -> np.ndarray:
    answer = server.request(
        "POST", "/v1/embeddings", {"input": text, "encoding_format": "float"}, headers=bearer()
    )
    assert answer.status == 200, answer.body
    return np.array(answer.json()["data"][0]["embedding"], dtype=np.float32)


def immich_vector(server: Server, image: bytes) -> np.ndarray:
    """The Immich route's vector of the bytes Frigate's client sends (it re-encodes every
    thumbnail as a JPEG of quality 85 first)."""
    sent = jpeg(Image.open(io.BytesIO(image)).convert("RGB"), quality=85)
    entries = json.dumps({"clip": {"visual": {"modelName": MODEL}}}).encode()
    form = (
        b'--b\r\nContent-Disposition: form-data; name="entries"\r\n\r\n' + entries + b"\r\n"
        b'--b\r\nContent-Disposition: form-data; name="image"; filename="t.jpg"\r\n\r\n'
        + sent
        + b"\r\n--b--\r\n"
    )
    headers = {**bearer(), "Content-Type": "multipart/form-data; boundary=b"}
    answer = server.request("POST", "/predict", form, headers=headers)
    assert answer.status == 200, answer.body
    return np.array(json.loads(answer.json()["clip"]), dtype=np.float32)


def check_vectors(vectors: list[list[float]], references: list[np.ndarray]) -> None:
    """Frigate's 768 floats: npuctl's own CLIP vector, then zeros."""
    assert len(vectors) == len(references)
    for vector, reference in zip(vectors, references, strict=True):
        values = np.array(vector, dtype=np.float32)
        assert values.shape == (768,)
        assert np.array_equal(values[:512], reference)
        assert not values[512:].any()


def test_frigates_client_embeds_texts_and_thumbnails_across_a_restart(
    clip_board: Board, tree: Path, key_file: Path, thumbnails: list[bytes]
) -> None:
    """Frigate right after the server starts (the models still loading): its provider finds
    the model and vision, its texts and thumbnails embed to npuctl's own CLIP vectors; the
    server restarts with a new media marker and Frigate's next thumbnails still embed (its
    client re-reads the marker after the refusal and retries once)."""
    env = {**clip_board.env, "NOE_DOUBLE_LOAD_MS": "1500"}
    server = start(env, "--api-key-file", str(key_file), wait=False)
    client = FrigateClient(tree)
    try:
        assert server.listening.wait(60) and server.url, server.stderr
        assert server.ready_at is None  # loading
        base = f"{server.url}/v1"  # Frigate strips /v1, as users often write it
        started = client.send(op="init", base_url=base, model=MODEL, api_key=KEY)
        assert started["provider"] == server.url and started["vision"] is True, started
        texts = client.send(op="text", texts=TEXTS)
        images = [base64.b64encode(image).decode() for image in thumbnails]
        seen = client.send(op="vision", images=images)
        assert server.ready.wait(60) and server.ready_at is not None, server.stderr
        assert started["answered"] < server.ready_at, "the client started after the models"
        assert texts["sent"] < server.ready_at  # the texts waited for the models
        check_vectors(texts["vectors"], [openai_vector(server, text) for text in TEXTS])
        references = [immich_vector(server, image) for image in thumbnails]
        check_vectors(seen["vectors"], references)
        first_marker = started["marker"]
        assert first_marker.startswith("<__media_") and seen["marker"] == first_marker
        assert f"llama.cpp's /embeddings: {server.url}/embeddings" in server.stderr
        port = server.port
        assert server.stop() == 0
        assert "Traceback" not in server.stderr

        server = start(clip_board.env, "--api-key-file", str(key_file), "--port", str(port))
        again = client.send(op="vision", images=images)
        assert again["marker"] != first_marker
        assert any("media marker changed" in line for line in again["log"]), again["log"]
        check_vectors(again["vectors"], references)
        check_vectors(client.send(op="text", texts=TEXTS[:1])["vectors"], [
            openai_vector(server, TEXTS[0])
        ])  # fmt: skip
    finally:
        client.close()
        assert server.stop() == 0
    assert "Traceback" not in server.stderr


def test_frigates_client_with_a_wrong_key_is_refused(
    clip_board: Board, tree: Path, key_file: Path
) -> None:
    server = start(clip_board.env, "--api-key-file", str(key_file))
    client = FrigateClient(tree)
    try:
        started = client.send(op="init", base_url=server.url, model=MODEL, api_key="wrong")
        assert started["vision"] is False
        assert any("401" in line for line in started["log"]), started["log"]
        refused = client.send(op="text", texts=TEXTS)
        assert refused["vectors"] == []
        assert any("401" in line and "API key" in line for line in refused["log"])
    finally:
        client.close()
        assert server.stop() == 0


def test_a_stable_marker_is_kept_across_starts(clip_board: Board, tree: Path) -> None:
    """--media-marker (or llama.cpp's LLAMA_MEDIA_MARKER) keeps the marker over a restart."""
    markers = []
    for _ in range(2):
        server = start({**clip_board.env, "LLAMA_MEDIA_MARKER": "<__npu__>"})
        try:
            markers.append(server.request("GET", "/props").json()["media_marker"])
        finally:
            assert server.stop() == 0
    assert markers == ["<__npu__>", "<__npu__>"]


# -- edges, as a peer sends them -----------------------------------------------------------
@pytest.fixture
def llama_server(clip_board: Board):
    running = start(clip_board.env, "--media-marker", "<__m__>")
    yield running
    assert running.stop() == 0, running.stderr
    assert "Traceback" not in running.stderr


def embeddings(server: Server, document: object, headers: dict | None = None):
    body = document if isinstance(document, bytes) else json.dumps(document).encode()
    return server.request(
        "POST", "/embeddings", body, headers=headers or {"Content-Type": "application/json"}
    )


def test_models_list_carries_llamacpps_fields(llama_server: Server) -> None:
    entries = llama_server.request("GET", "/v1/models").json()["data"]
    first = entries[0]
    assert first["id"] == "clip" and MODEL in first["aliases"]
    assert first["architecture"]["input_modalities"] == ["text", "image"]
    assert first["object"] == "model"  # still OpenAI's entry
    props = llama_server.request("GET", f"/props?model={MODEL}").json()
    assert props["media_marker"] == "<__m__>" and props["modalities"]["vision"] is True
    upstream = llama_server.request("GET", f"/upstream/{MODEL}/props")
    assert upstream.status == 200 and upstream.json()["media_marker"] == "<__m__>"


def test_texts_and_images_come_back_in_content_order(llama_server: Server, bus_jpg) -> None:
    image = base64.b64encode(bus_jpg.read_bytes()).decode()
    answer = embeddings(
        llama_server,
        {
            "model": "clip",
            "content": [
                "a bus",
                {"prompt_string": "<__m__>\n", "multimodal_data": [image]},
                {"prompt_string": "a bus"},
            ],
        },
    )
    assert answer.status == 200, answer.body
    items = json.loads(answer.body)
    assert [item["index"] for item in items] == [0, 1, 2]
    vectors = [np.array(item["embedding"], dtype=np.float32) for item in items]
    assert all(vector.shape == (1, 512) for vector in vectors)
    assert np.array_equal(vectors[0], vectors[2])
    assert not np.array_equal(vectors[0], vectors[1])


@pytest.mark.parametrize(
    ("document", "status", "says"),
    [
        (b"{not json", 400, "not valid JSON"),
        ([1, 2], 400, "JSON object"),
        ({"content": []}, 400, "non-empty"),
        ({"content": [3]}, 400, "content[0]"),
        ({"content": "   "}, 400, "empty"),
        ({"content": ["a"] * 65}, 400, "at most 64"),
        ({"content": "a", "model": "llama-3"}, 404, "not served here"),
        ({"content": "a", "model": ["clip"]}, 400, "must be a string"),
        ({"content": "a", "model": 7}, 400, "must be a string"),
        (
            {"content": [{"prompt_string": "<__media__>\n", "multimodal_data": ["AAAA"]}]},
            400,
            "this server's marker is <__m__>",
        ),
        ({"content": [{"prompt_string": "<__m__>"}]}, 400, "without 'multimodal_data'"),
        (
            {"content": [{"prompt_string": "a cat <__m__>", "multimodal_data": ["AAAA"]}]},
            400,
            "one text or one image",
        ),
        (
            {"content": [{"prompt_string": "<__m__>", "multimodal_data": ["not base64!"]}]},
            400,
            "not valid base64",
        ),
        (
            {"content": [{"prompt_string": "<__m__>", "multimodal_data": ["aGVsbG8="]}]},
            415,
            "content[0]: the image is not a JPEG",
        ),
        (
            {"content": [{"prompt_string": "<__m__>", "multimodal_data": ["AAAA"]}] * 9},
            400,
            "at most 8",
        ),
    ],
)
def test_bad_requests_get_a_4xx_in_llamacpps_shape(llama_server, document, status, says) -> None:
    answer = embeddings(llama_server, document)
    assert answer.status == status, answer.body
    error = answer.json()["error"]
    assert error["code"] == status and says in error["message"], error
    assert error["type"] == ("not_found_error" if status == 404 else "invalid_request_error")


def test_the_key_is_a_bearer_token_refused_in_llamacpps_shape(clip_board, key_file) -> None:
    server = start(clip_board.env, "--api-key-file", str(key_file))
    try:
        refused = embeddings(server, {"content": "a"}, headers=bearer("wrong"))
        assert refused.status == 401
        assert refused.json()["error"]["type"] == "authentication_error"
        assert server.request("GET", "/props").status == 401
        assert embeddings(server, {"content": "a"}, headers=bearer()).status == 200
    finally:
        assert server.stop() == 0


def test_rocket_says_it_embeds_nothing_in_llamacpps_shape(rocket_models) -> None:
    server = start({**rocket_models.env, "NPUCTL_PLATFORM": "rocket"})
    try:
        answer = embeddings(server, {"content": "a person"})
        assert answer.status == 404
        error = answer.json()["error"]
        assert error["type"] == "not_found_error" and "no CLIP model" in error["message"]
        props = server.request("GET", "/props").json()
        assert props["modalities"]["vision"] is False
    finally:
        assert server.stop() == 0


def peak_rss_kib(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmHWM:\s+(\d+)", status).group(1))  # type: ignore[union-attr]


def test_long_thin_pictures_are_embedded_from_their_crop_alone(llama_server: Server) -> None:
    """A 1x10000 JPEG of 4 KB once became a 224x2240000 picture (1.5 GB) before the centre
    crop, and a 1x10000000 PNG a size Pillow could not hold (500): only the crop's lines are
    resampled now, through every protocol that takes an image."""
    buffer = io.BytesIO()
    Image.new("RGB", (1, 10_000_000), (9, 99, 200)).save(buffer, format="PNG")
    pictures = [jpeg(Image.new("RGB", (1, 10000), (200, 30, 30)), quality=50), buffer.getvalue()]
    pictures.append(jpeg(Image.new("RGB", (10000, 1), (200, 30, 30)), quality=50))
    assert embeddings(llama_server, {"content": "warm"}).status == 200
    before = peak_rss_kib(llama_server.process.pid)
    for picture in pictures:
        encoded = base64.b64encode(picture).decode()
        item = {"prompt_string": "<__m__>\n", "multimodal_data": [encoded]}
        answer = embeddings(llama_server, {"content": [item]})
        assert answer.status == 200, answer.body[:300]
        openai = llama_server.embed({"input": f"data:image/png;base64,{encoded}"})
        assert openai.status == 200, openai.body[:300]
        vector = json.loads(answer.body)[0]["embedding"][0]
        assert np.allclose(openai.json()["data"][0]["embedding"], vector)
        entries = json.dumps({"clip": {"visual": {"modelName": MODEL}}}).encode()
        form = (
            b'--b\r\nContent-Disposition: form-data; name="entries"\r\n\r\n'
            + entries
            + b'\r\n--b\r\nContent-Disposition: form-data; name="image"; filename="p"\r\n\r\n'
            + picture
            + b"\r\n--b--\r\n"
        )
        headers = {"Content-Type": "multipart/form-data; boundary=b"}
        immich = llama_server.request("POST", "/predict", form, headers=headers)
        assert immich.status == 200, immich.body[:300]
    grown = peak_rss_kib(llama_server.process.pid) - before
    assert grown < 200 * 1024, f"the peak resident memory grew by {grown} KiB"


def test_props_checks_every_model_a_peer_repeats(llama_server: Server) -> None:
    assert llama_server.request("GET", f"/props?model={MODEL}&model={MODEL}").status == 200
    for query in (f"model={MODEL}&model=llama-3", f"model=llama-3&model={MODEL}"):
        answer = llama_server.request("GET", f"/props?{query}")
        assert answer.status == 404, (query, answer.body)
        assert "llama-3" in answer.json()["error"]["message"]


def test_a_model_is_found_by_an_alias_the_list_gives_it(llama_server: Server) -> None:
    entry = llama_server.request("GET", f"/v1/models/{MODEL}")
    assert entry.status == 200, entry.body
    assert entry.json()["id"] == "clip" and MODEL in entry.json()["aliases"]
    assert llama_server.request("GET", "/v1/models/llama-3").status == 404


def test_paths_under_llamacpps_routes_answer_404_in_its_shape(llama_server: Server) -> None:
    for path in ("/props/", "/props/x", "/embeddings/x"):
        answer = llama_server.request("GET", path)
        assert answer.status == 404, (path, answer.body)
        error = answer.json()["error"]
        assert error["code"] == 404 and error["type"] == "not_found_error", (path, error)
