"""npuctl watch: system metrics as text, embedded on the NPU, scored for anomalies. Knows no
NPU family (it embeds through npuctl serve or a platform's Embedder)."""
