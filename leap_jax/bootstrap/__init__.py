"""Bootstrap a policy from scratch: a verified kernel corpus generated from the task suite
(`corpus`, `mutations`), a byte-level BPE tokenizer trained on it (`tokenizer_train`), and supervised
warm-up of a small random decoder on it (`sft`)."""
