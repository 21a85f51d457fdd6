"""Kubernetes / K3s manifests for running 'npuctl serve' on a fleet, from one template set."""
