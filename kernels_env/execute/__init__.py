"""Run a compiled submission against the reference on the device: inputs, trials, timing, the GPU lock."""
