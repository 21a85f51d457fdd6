"""HTML form bodies as DeepStack clients send them: multipart/form-data (RFC 7578) with the
image as a file, or application/x-www-form-urlencoded without one. The standard library's
email parser reads multipart too, but splits binary parts line by line: about 9 ms for one
camera frame, more than half of the NPU's time for it; finding the boundaries costs
microseconds."""

from __future__ import annotations

import re
from urllib.parse import parse_qsl

MAX_PARTS = 32  # fields of one form; DeepStack's have at most three
_BOUNDARY = re.compile(r'boundary=(?:"([^"]{1,70})"|([^\s;,"]{1,70}))', re.IGNORECASE)
_NAME = re.compile(rb'[\s;]name="([^"]*)"|[\s;]name=([^\s;]+)', re.IGNORECASE)


class FormError(ValueError):
    """A body that is not the form it claims to be; the message says what is wrong."""


def parse(body: bytes, content_type: str) -> dict[str, bytes]:
    """The form's fields by name (the first of repeated names)."""
    media = content_type.partition(";")[0].strip().lower()
    if media == "multipart/form-data":
        return _multipart(body, content_type)
    if media == "application/x-www-form-urlencoded":
        try:
            text = body.decode("ascii")
        except UnicodeDecodeError:
            raise FormError("an urlencoded form must be ASCII") from None
        fields: dict[str, bytes] = {}
        for name, value in parse_qsl(text, max_num_fields=MAX_PARTS):
            fields.setdefault(name, value.encode())
        return fields
    raise FormError(
        f"the body is {media or 'of no type'}, not a form: send multipart/form-data with the "
        "image in the field 'image'"
    )


def _multipart(body: bytes, content_type: str) -> dict[str, bytes]:
    found = _BOUNDARY.search(content_type)
    if not found:
        raise FormError("multipart/form-data without a boundary in its Content-Type")
    delimiter = b"--" + (found.group(1) or found.group(2)).encode("latin-1")
    start = body.find(delimiter)
    if start < 0:
        raise FormError("the form's boundary is not in the body (a truncated upload?)")
    fields: dict[str, bytes] = {}
    position = start + len(delimiter)
    separator = b"\r\n" + delimiter
    for _ in range(MAX_PARTS + 1):
        if body.startswith(b"--", position):
            return fields  # the closing delimiter
        if not body.startswith(b"\r\n", position):
            raise FormError("a form part does not start on a new line")
        head_end = body.find(b"\r\n\r\n", position + 2)
        end = body.find(separator, position + 2)
        if head_end < 0 or end < 0 or head_end > end:
            raise FormError("the form ends in the middle of a part (a truncated upload?)")
        head = body[position + 2 : head_end]
        name = _disposition_name(head)
        if name is not None:
            fields.setdefault(name, body[head_end + 4 : end])
        position = end + len(separator)
    raise FormError(f"the form has more than {MAX_PARTS} parts")


def _disposition_name(head: bytes) -> str | None:
    for line in head.split(b"\r\n"):
        key, _, value = line.partition(b":")
        if key.strip().lower() == b"content-disposition":
            found = _NAME.search(b";" + value)
            if found:
                return (found.group(1) if found.group(1) is not None else found.group(2)).decode(
                    "utf-8", "replace"
                )
    return None
