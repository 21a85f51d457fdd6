"""Build pipeline of the aipu-dkms package: config -> fetch -> patch -> render -> package."""
