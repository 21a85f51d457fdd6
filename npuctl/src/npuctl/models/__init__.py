"""Model management: the manifest, the model directory and its lock file, downloads."""
