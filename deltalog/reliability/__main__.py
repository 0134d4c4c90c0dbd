"""``python -m deltalog.reliability``: see :mod:`deltalog.reliability.figures`."""

import os
import sys

from deltalog.reliability.figures import main

if __name__ == "__main__":
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    sys.exit(main())
