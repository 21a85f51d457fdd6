"""npuctl provision: the board set-up Debian policy keeps out of the packages."""
