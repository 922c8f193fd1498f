"""What the harness judges a run by: the output poison, cached expected outputs, timing statistics, the
reference timings kept across workers, and the feedback text of a result."""
