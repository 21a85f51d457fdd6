"""Defaults and limits that several modules and the command line share. Importing this costs
nothing: the command line reads it before it knows which command runs."""

DEFAULT_LIBRARY = "/usr/share/cix/lib/libnoe.so"
DEFAULT_TIMEOUT_MS = 10_000
# noe_job_infer_sync takes the timeout as an int32.
MAX_TIMEOUT_MS = 2**31 - 1
# Images above this many pixels are refused before they are decoded: a 10000x10000 PNG takes
# about 1 GB to decode. 50 megapixels admit every phone and most camera photos.
DEFAULT_MAX_IMAGE_PIXELS = 50_000_000
