"""``python -m pipeline``: the command line (pipeline/cli/)."""

import sys

from pipeline.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
