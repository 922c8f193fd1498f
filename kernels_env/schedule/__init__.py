"""Score one submission (pipeline) and schedule many (the evaluation pool and its workers)."""
