"""Defaults and limits that several modules and the command line share. Importing this costs
nothing: the command line reads it before it knows which command runs."""

# Images above this many pixels are refused before they are decoded: a 10000x10000 PNG takes
# about 1 GB to decode. 50 megapixels admit every phone and most camera photos.
DEFAULT_MAX_IMAGE_PIXELS = 50_000_000
