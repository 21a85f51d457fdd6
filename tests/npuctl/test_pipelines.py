"""CLIP image preprocessing and YOLOv8 pre/post-processing in numpy."""

import numpy as np
import pytest
from PIL import Image

from npuctl.embeddings import normalise, similarity
from npuctl.platforms.zhouyi.noe import abi
from npuctl.platforms.zhouyi.noe.binding import TensorInfo, quantize
from npuctl.platforms.zhouyi.pipelines import clip_image, yolo
from testkit.reference_nms import straightforward_nms
from testkit.yolo_outputs import every_anchor_output, synthetic_output


def test_clip_preprocessing_matches_clip_transform(bus_jpg):
    image = Image.open(bus_jpg).convert("RGB")  # 810 x 1080
    tensor = clip_image.preprocess(image)
    assert tensor.shape == (3, 224, 224) and tensor.dtype == np.float32
    # CLIP's transform written out plainly: Resize(224, bicubic) on the shortest side,
    # CenterCrop(224), ToTensor, Normalize(mean, std).
    resized = image.resize((224, int(224 * 1080 / 810)), Image.Resampling.BICUBIC)
    top = round((resized.height - 224) / 2.0)
    crop = np.asarray(resized.crop((0, top, 224, top + 224)), dtype=np.float32) / 255.0
    expected = ((crop - clip_image.MEAN) / clip_image.STD).transpose(2, 0, 1)
    assert np.allclose(tensor, expected, atol=1e-5)


def test_clip_input_quantized_with_the_verified_sign():
    info = TensorInfo(0, 0, 150528, 64.75, 12, abi.DataType.U8)
    assert quantize(np.array([1.0, 0.0]), info).tolist() == [53, 0]  # guide's sign: 77, 12


def test_landscape_images_are_cropped_in_the_middle():
    image = Image.new("RGB", (448, 224), (0, 0, 0))
    image.paste((255, 255, 255), (112, 0, 336, 224))  # white centre half
    tensor = clip_image.preprocess(image)
    white = (1.0 - clip_image.MEAN[0]) / clip_image.STD[0]
    assert np.allclose(tensor[0], white, atol=1e-3)


def test_embeddings_are_unit_length_and_similarity_is_cosine():
    a, b = normalise(np.array([3.0, 4.0])), normalise(np.array([4.0, 3.0]))
    assert np.linalg.norm(a) == pytest.approx(1.0)
    scores = similarity([a, b], [a, b])
    assert scores[0, 0] == pytest.approx(1.0) and scores[0, 1] == pytest.approx(0.96)


def test_letterbox_is_bgr_chw_padded_with_114():
    image = Image.new("RGB", (320, 160), (255, 0, 0))  # red, landscape
    tensor, box = yolo.letterbox(image)
    assert tensor.shape == (3, 640, 640)
    assert box.ratio == 2.0 and box.pad_x == 0 and box.pad_y == 160
    pixels = np.rint(tensor * 255).astype(int)
    assert pixels[:, 0, 0].tolist() == [114, 114, 114]  # padding
    assert pixels[:, 320, 320].tolist() == [0, 0, 255]  # red, in B, G, R order


def test_decode_maps_boxes_back_to_the_original_image():
    image = Image.new("RGB", (810, 1080))
    _, box = yolo.letterbox(image)
    # A person at (100..300, 200..700) in the original: in letterbox coordinates
    ratio = box.ratio
    cx, cy = box.pad_x + 200 * ratio, box.pad_y + 450 * ratio
    output = synthetic_output([(0, 0.9, cx, cy, 200 * ratio, 500 * ratio)])
    detections = yolo.decode(output, box)
    assert len(detections) == 1
    person = detections[0]
    assert person.label == "person" and person.score > 0.8
    assert person.box == pytest.approx((100, 200, 300, 700), abs=6)


def test_nms_is_class_wise():
    image = Image.new("RGB", (640, 640))
    _, box = yolo.letterbox(image)
    same_place = (320, 320, 100, 100)
    output = synthetic_output([(0, 0.9, *same_place), (16, 0.8, *same_place)])
    labels = sorted(d.label for d in yolo.decode(output, box))
    assert labels == ["dog", "person"]


def test_fast_nms_equals_straightforward_nms():
    rng = np.random.default_rng(1)
    for _ in range(20):
        n = 300
        xy = rng.uniform(0, 600, (n, 2))
        wh = rng.uniform(10, 120, (n, 2))
        boxes = np.concatenate([xy, xy + wh], axis=1).astype(np.float32)
        scores = rng.uniform(0.25, 1, n).astype(np.float32)
        classes = rng.integers(0, 5, n)
        fast = yolo.nms(boxes, scores, classes, 0.45)
        slow = straightforward_nms(boxes, scores, classes, 0.45)
        assert sorted(fast.tolist()) == sorted(slow)


def test_nms_with_a_limit_keeps_the_reference_prefix():
    """Stopping at ``limit`` keeps exactly the best ``limit`` of what full greedy NMS keeps, on
    scattered boxes and on crowds where each kept box strikes out many."""
    rng = np.random.default_rng(2)
    for spread in (600, 60):
        for _ in range(10):
            n = 700
            xy = rng.uniform(0, spread, (n, 2))
            wh = rng.uniform(10, 120, (n, 2))
            boxes = np.concatenate([xy, xy + wh], axis=1).astype(np.float32)
            scores = rng.uniform(0.1, 1, n).astype(np.float32)
            classes = rng.integers(0, 3, n)
            reference = sorted(
                straightforward_nms(boxes, scores, classes, 0.45), key=lambda k: -scores[k]
            )
            for limit in (1, 20, 300, None):
                kept = yolo.nms(boxes, scores, classes, 0.45, limit=limit).tolist()
                assert kept == reference[:limit]


def test_decode_of_every_anchor_is_the_reference_on_the_best_candidates():
    """With all 8,400 anchors above the threshold, decode compares only the best
    max_candidates (as Ultralytics' max_nms does) and stops at max_detections; what it returns
    is the reference NMS of those candidates, best first, every box inside the picture."""
    output = every_anchor_output()
    image = Image.new("RGB", (810, 1080))
    _, box = yolo.letterbox(image)
    found = yolo.decode(output, box, conf=0.1, max_detections=20)
    assert len(found) == 20
    values = output.astype(np.float32)
    best = values[4:].max(axis=0)
    top = np.argsort(-best, kind="stable")[: yolo.MAX_CANDIDATES]
    cx, cy, w, h = values[:4, top]
    boxes = np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], axis=1)
    classes = values[4:, top].argmax(axis=0)
    kept = straightforward_nms(boxes, best[top], classes, 0.45)
    reference = sorted(kept, key=lambda k: (-best[top][k], top[k]))[:20]  # ties: anchor order
    assert [d.class_id for d in found] == classes[reference].tolist()
    assert [d.score for d in found] == pytest.approx(best[top][reference].tolist())
    assert all(
        0 <= d.box[0] <= d.box[2] <= 810 and 0 <= d.box[1] <= d.box[3] <= 1080 for d in found
    )


@pytest.mark.parametrize(
    ("scale", "zero_point", "dtype"),
    [(64.75, 12, np.uint8), (32.0, -3, np.int8), (100.0, 0, np.int16)],
)
def test_table_quantization_equals_quantize_of_preprocess(bus_jpg, scale, zero_point, dtype):
    image = Image.open(bus_jpg)
    info = TensorInfo(
        0,
        0,
        150528 * np.dtype(dtype).itemsize,
        scale,
        zero_point,
        {np.uint8: abi.DataType.U8, np.int8: abi.DataType.S8, np.int16: abi.DataType.S16}[dtype],
    )
    expected = quantize(clip_image.preprocess(image), info)
    assert np.array_equal(clip_image.quantized(image, scale, zero_point, np.dtype(dtype)), expected)


def test_ordinary_pictures_are_pillows_resize_then_crop(bus_jpg):
    """Up to EXACT_ASPECT the whole picture is resized, then cropped: bit for bit Pillow's
    resize, on every shape, including those Pillow resizes vertical pass first (a narrow,
    tall picture that shrinks mostly in height)."""
    bus = Image.open(bus_jpg).convert("RGB")
    for image, size in (
        (bus, (224, 298)),
        (bus.crop((0, 0, 301, 1000)), (224, 744)),
        (bus.crop((0, 0, 800, 600)).rotate(90, expand=True), (224, 298)),
    ):
        assert max(size) <= clip_image.EXACT_ASPECT * clip_image.SIZE
        left, top = round((size[0] - 224) / 2), round((size[1] - 224) / 2)
        one_call = image.resize(size, Image.Resampling.BICUBIC)
        expected = one_call.crop((left, top, left + 224, top + 224))
        ours = clip_image.resize_and_crop(image)
        assert np.array_equal(np.asarray(ours), np.asarray(expected))
