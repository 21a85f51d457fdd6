"""One module per command group."""
