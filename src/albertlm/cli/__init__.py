"""Layer 6: the `albertlm` command line."""
