"""The project's benchmarks (make bench): each a module run as a process of its own."""

# Every benchmark, in the order make bench runs them; each writes <name with dashes>.json.
BENCHES = (
    "host_cost",
    "serve_cost",
    "watch_quality",
    "vision_cost",
    "memory_budget",
    "frigate_zmq",
    "hostile",
    "image_size",
)
