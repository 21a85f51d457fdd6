"""What the tests and make bench share: the server run as a child process (serve_process), the
pinned test data (testdata), reference implementations (reference_nms), made-to-order models
and outputs (tflite_models, yolo_outputs), photos as Immich sends them (immich_photos) and
metric streams (metric_streams). The tools import this package, never the tests."""
