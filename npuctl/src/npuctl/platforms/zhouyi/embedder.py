"""CLIP on the Zhouyi NPU as an embedder ('npuctl serve', 'npuctl watch'): texts and images in
one 512-d space. Tensors are prepared on the request threads; every libnoe call happens on the
runtime's owner thread (the server's, or the caller's in 'npuctl watch')."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

import numpy as np

from npuctl.embedder import JobReuse, Prepared, Rejected
from npuctl.errors import NpuctlError

from .noe.binding import dequantize
from .noe_runtime import NoeRuntime
from .pipelines import clip_image
from .pipelines.clip_tokenizer import CONTEXT_LENGTH, EOT, SOT, padded
from .preparation import clip_input, load_tokenizer
from .runtime import npu

if TYPE_CHECKING:
    from PIL import Image

    from npuctl.settings import Settings

GOLDEN_TEXTS = ("a photo of a cat", "a wiring diagram of a power station")


class ClipEmbedder:
    dimensions = 512
    model_names: tuple[str, ...] = ("clip", "clip-text", "clip-visual")

    def __init__(self, settings: Settings, runtime: NoeRuntime | None = None) -> None:
        self.tokenizer = load_tokenizer(settings, None)
        if runtime is None:  # in-process use: its own runtime with both encoders
            device, manifest = npu(settings), settings.manifest
            files = {"clip-text": device.resolve(manifest.model("clip-text"), None)}
            with contextlib.suppress(NpuctlError):  # images are embedded when the model is there
                files["clip-visual"] = device.resolve(manifest.model("clip-visual"), None)
            runtime = NoeRuntime(device, files)
        self.runtime = runtime
        manifest = settings.manifest
        self.immich_names = tuple(
            sorted({name for key in runtime.files if (name := manifest.get(key).immich)})
        )
        self.keys = {
            modality: key
            for modality, key in (("text", "clip-text"), ("image", "clip-visual"))
            if key in runtime.files
        }
        self.modalities = tuple(self.keys)

    # -- any thread -----------------------------------------------------------------------
    def prepare_text(self, text: str, truncate: bool) -> Prepared:
        if not text.strip():
            raise Rejected("the text is empty")
        ids, more = self.tokenizer.window(text, CONTEXT_LENGTH - 2)
        return self._tokens(ids, more, truncate)

    def prepare_token_ids(self, ids: list[int], truncate: bool) -> Prepared:
        vocabulary = self.tokenizer.vocab_size
        if any(not 0 <= token < vocabulary for token in ids):
            raise Rejected(f"token ids must be in 0..{vocabulary - 1}", "invalid_value")
        ids = [token for token in ids if token not in (SOT, EOT)]
        limit = CONTEXT_LENGTH - 2
        return self._tokens(ids[:limit], len(ids) > limit, truncate)

    def _tokens(self, ids: list[int], more: bool, truncate: bool) -> Prepared:
        if more and not truncate:
            raise Rejected(
                f"the text is longer than the {CONTEXT_LENGTH} tokens CLIP reads: shorten it, "
                'or send "truncate": true',
                "context_length_exceeded",
            )
        tokens = padded(ids)
        model = self.runtime.models.get("clip-text")
        dtype = model.inputs[0].dtype if model else np.int32
        return Prepared("text", tokens.astype(dtype), len(ids) + 2)

    def prepare_image(self, picture: Image.Image) -> Prepared:
        self._need_images()
        return Prepared("image", clip_input(picture, self.runtime.models["clip-visual"].inputs[0]))

    def prepare_photo(self, picture: Image.Image) -> Prepared:
        self._need_images()
        info = self.runtime.models["clip-visual"].inputs[0]
        return Prepared("image", clip_input(picture, info, clip_image.immich_resize_and_crop))

    def _need_images(self) -> None:
        if "image" not in self.keys:
            raise Rejected(
                "this server has no image model: run 'npuctl models fetch clip-visual' and "
                "restart it",
                "model_not_found",
            )

    def golden_inputs(self) -> tuple[Prepared, Prepared]:
        first, second = GOLDEN_TEXTS
        return self.prepare_text(first, False), self.prepare_text(second, False)

    def vector(self, modality: str, outputs: list[np.ndarray]) -> np.ndarray:
        """The embedding in the encoder's raw outputs (any thread)."""
        model = self.runtime.models[self.keys[modality]]
        return dequantize(outputs[0], model.graph.outputs[0])

    # -- in-process use ('npuctl watch'): the caller's thread owns the NPU ----------------
    def start(self) -> JobReuse:
        return self.runtime.start()

    def embed(self, prepared: Prepared) -> np.ndarray:
        key = self.keys[prepared.modality]
        return self.vector(prepared.modality, self.runtime.infer(key, [prepared.tensor]))

    def stop(self) -> None:
        self.runtime.stop()


def open_embedder(settings: Settings) -> ClipEmbedder:
    return ClipEmbedder(settings)
