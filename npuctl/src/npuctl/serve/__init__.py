"""npuctl serve: an OpenAI-compatible embedding service in front of one NPU. Knows no NPU
family: a platform supplies an ``Embedder`` (embedder.py) and this package does the rest."""
