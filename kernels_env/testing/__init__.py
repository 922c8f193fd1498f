"""Test helpers shipped with kernels_env (no GPU needed): a numpy fake Device for harness tests."""
