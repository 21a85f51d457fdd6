"""npuctl serve: the inference server of one NPU. Knows no NPU family: a family's adapter
(.families) supplies its models and runtimes, and this package speaks every protocol of
.protocols over them (detection, classification, embeddings, tensors)."""
