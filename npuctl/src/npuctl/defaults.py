"""Defaults and limits that several modules and the command line share. Importing this costs
nothing: the command line reads it before it knows which command runs."""

import os
from pathlib import Path

# Images above this many pixels are refused before they are decoded: a 10000x10000 PNG takes
# about 1 GB to decode. 50 megapixels admit every phone and most camera photos.
DEFAULT_MAX_IMAGE_PIXELS = 50_000_000

# npuctl serve's TCP port: the K3s manifests, the container image and its health check.
DEFAULT_SERVE_PORT = 8340
# Its port as Frigate's remote detector (npuctl serve --zmq tcp://*:5555), where one is opened:
# the one Frigate's documentation uses for its ZeroMQ detectors.
DEFAULT_ZMQ_PORT = 5555


# Where the packaged server (npuctl-serve.service, RuntimeDirectory=npuctl) keeps its socket,
# and what it tells the doctor there: the model files Frigate uploaded, and their fate.
SERVICE_RUNTIME_DIRECTORY = Path("/run/npuctl")
FRIGATE_UPLOADS_RECORD = "frigate-uploads.json"


def default_serve_socket() -> Path | None:
    """Where 'npuctl serve' listens by default and where its clients ('npuctl watch') look."""
    if runtime := os.environ.get("RUNTIME_DIRECTORY"):  # systemd's RuntimeDirectory=
        return Path(runtime.split(":")[0]) / "serve.sock"
    if runtime := os.environ.get("XDG_RUNTIME_DIR"):
        return Path(runtime) / "npuctl" / "serve.sock"
    return None
