"""Pre- and post-processing in numpy; nothing here knows about libnoe or ctypes."""
