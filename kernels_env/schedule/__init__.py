"""Score one submission (pipeline) and schedule many: the evaluation pool, its workers, and Ray hosts."""
