"""``python -m tooling.reliability``: see :mod:`tooling.reliability.figures`."""

import os
import sys

from tooling.reliability.figures import main

if __name__ == "__main__":
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    sys.exit(main())
