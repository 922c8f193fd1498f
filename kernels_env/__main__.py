"""`python -m kernels_env ...`: see kernels_env.cli."""
import sys

from kernels_env.cli import main

if __name__ == "__main__":
    sys.exit(main())
