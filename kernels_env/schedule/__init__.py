"""Where evaluation jobs run: scheduling EvalPool jobs across machines (Ray hosts)."""
