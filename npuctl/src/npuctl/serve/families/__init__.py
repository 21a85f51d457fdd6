"""Each NPU family's adapter to npuctl serve (its models as the server serves them, its NPU
runtime for the owner threads), shipped with the server in npuctl-serve: a family's
platform names its adapter here (Platform.serving), and only the server imports it."""
