"""Parse and check a submission: the CUDA and launch blocks, kernel signatures, the launch plan."""
