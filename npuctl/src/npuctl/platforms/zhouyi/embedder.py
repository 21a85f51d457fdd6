"""CLIP on the Zhouyi NPU for 'npuctl serve': texts and images in one 512-d space. Tensors are
prepared on the request threads; every libnoe call happens on the server's NPU owner thread
(start, embed, stop)."""

from __future__ import annotations

import contextlib
from contextlib import ExitStack
from typing import TYPE_CHECKING

import numpy as np

from npuctl.embedder import JobReuse, NpuFailure, Prepared, Rejected
from npuctl.errors import InputError, NpuctlError
from npuctl.images import decode_rgb

from .commands import clip_input, load_tokenizer
from .noe.abi import TIMEOUT_STATUS
from .noe.binding import Job, dequantize
from .pipelines.clip_tokenizer import CONTEXT_LENGTH, EOT, SOT, padded
from .runtime import Model, ModelFile, npu

if TYPE_CHECKING:
    from npuctl.cli import Settings

GOLDEN_TEXTS = ("a photo of a cat", "a wiring diagram of a power station")


class ClipEmbedder:
    dimensions = 512

    def __init__(self, settings: Settings) -> None:
        self.npu = npu(settings)
        manifest = settings.manifest
        self.max_pixels = settings.max_image_pixels
        self.tokenizer = load_tokenizer(settings, None)
        self.files: dict[str, ModelFile] = {
            "text": self.npu.resolve(manifest.model("clip-text"), None)
        }
        with contextlib.suppress(NpuctlError):  # images are served when the model is there
            self.files["image"] = self.npu.resolve(manifest.model("clip-visual"), None)
        self.modalities = tuple(self.files)
        self.model_names = ("clip", "clip-text", "clip-visual")
        self.models: dict[str, Model] = {}
        self.reuse = JobReuse()
        self._jobs: dict[str, Job] = {}
        self._job_stacks: dict[str, ExitStack] = {}
        self._stack = ExitStack()

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
        model = self.models.get("text")
        dtype = model.inputs[0].dtype if model else np.int32
        return Prepared("text", tokens.astype(dtype), len(ids) + 2)

    def prepare_image(self, data: bytes) -> Prepared:
        if "image" not in self.files:
            raise Rejected(
                "this server has no image model: run 'npuctl models fetch clip-visual' and "
                "restart it",
                "model_not_found",
            )
        try:
            picture = decode_rgb(data, self.max_pixels)
        except InputError as error:
            raise Rejected(str(error), "invalid_image") from None
        return Prepared("image", clip_input(picture, self.models["image"].inputs[0]))

    def golden_inputs(self) -> tuple[Prepared, Prepared]:
        first, second = GOLDEN_TEXTS
        return self.prepare_text(first, False), self.prepare_text(second, False)

    # -- the NPU owner thread -------------------------------------------------------------
    def start(self) -> JobReuse:
        session = self._stack.enter_context(self.npu.session())
        for modality, file in self.files.items():
            self.models[modality] = self._stack.enter_context(self.npu.model(session, file))
        for modality, model in self.models.items():
            self._probe_reuse(modality, model)
        return self.reuse

    def _probe_reuse(self, modality: str, model: Model) -> None:
        """A job may serve input after input only if its second answer equals a new job's
        answer to the same input (some runtimes keep the first inputs or outputs)."""
        info = model.inputs[0]
        first = np.zeros(info.count, dtype=info.dtype)
        second = np.ones(info.count, dtype=info.dtype)
        fresh = model.run([second]).raw[0]
        stack = ExitStack()
        job = stack.enter_context(model.graph.job())
        reused = [self._through(job, model, data) for data in (first, second)]
        if np.array_equal(reused[1], fresh) and not np.array_equal(reused[0], reused[1]):
            self._jobs[modality], self._job_stacks[modality] = job, stack
            self.reuse.reused[modality] = True
        else:
            stack.close()
            self.reuse.reused[modality] = False
            self.reuse.why[modality] = "a reused job answered differently: a new job per input"

    def _through(self, job: Job, model: Model, data: np.ndarray) -> np.ndarray:
        job.load(0, data)
        job.infer(model.timeout_ms)
        return job.output(0)

    def embed(self, prepared: Prepared) -> np.ndarray:
        model = self.models[prepared.modality]
        try:
            job = self._jobs.get(prepared.modality)
            if job is None:
                raw = model.run([prepared.tensor]).raw[0]
            else:
                raw = self._through(job, model, prepared.tensor)
        except NpuctlError as error:
            self._drop_job(prepared.modality)  # a job that failed is not trusted again
            status = getattr(error, "status", None)
            raise NpuFailure(
                str(error), "npu_timeout" if status == TIMEOUT_STATUS else "npu_error"
            ) from None
        return dequantize(raw, model.graph.outputs[0])

    def _drop_job(self, modality: str) -> None:
        stack = self._job_stacks.pop(modality, None)
        self._jobs.pop(modality, None)
        if stack is not None:
            with contextlib.suppress(NpuctlError):
                stack.close()
        if self.reuse.reused.get(modality):
            self._renew_job(modality)

    def _renew_job(self, modality: str) -> None:
        stack = ExitStack()
        try:
            self._jobs[modality] = stack.enter_context(self.models[modality].graph.job())
            self._job_stacks[modality] = stack
        except NpuctlError:
            stack.close()  # the next input runs on a new job of its own

    def stop(self) -> None:
        for modality in list(self._job_stacks):
            self._job_stacks.pop(modality).close()
        self._jobs.clear()
        self._stack.close()


def open_embedder(settings: Settings) -> ClipEmbedder:
    return ClipEmbedder(settings)
