"""Running the trainer SPMD on a JAX device mesh with axes ("data", "fsdp", "tensor").

`mesh.make_mesh` builds the mesh from a `data / fsdp / tensor` spec (-1 = the rest of the devices);
`rules` maps parameter paths to `PartitionSpec`s (FSDP over `fsdp`, Megatron-style over `tensor`,
the stacked layer axis never sharded) and places params, optimizer state and update batches.
A mesh of one device is the single-device path: nothing here is used then.

Not done yet: sharding constraints on activations inside `decoder.forward`; the strided
micro-batch split (`make_update` cuts [B] into contiguous micro-batches, so each lands on a subset
of the data-parallel shards unless batch_put places it, as accumulate="loop" does); a bf16 sampling
replica and an explicitly sharded KV cache with data-parallel batch buckets (the Sampler runs
correctly on sharded params, GSPMD choosing the rest); multi-host (`jax.distributed`, process-0
evaluation, async orbax).
"""
