"""Running the trainer SPMD on a JAX device mesh with axes ("data", "fsdp", "tensor").

`mesh.make_mesh` builds the mesh from a `data / fsdp / tensor` spec (-1 = the rest of the devices);
`rules` maps parameter paths to `PartitionSpec`s (FSDP over `fsdp`, Megatron-style over `tensor`,
the stacked layer axis never sharded) and places params, optimizer state and update batches.
A mesh of one device is the single-device path: nothing here is used then.
"""
