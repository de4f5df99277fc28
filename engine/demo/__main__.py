"""`python -m ghostless.demo` (make demo)."""

import sys

from ghostless.demo.run import main

sys.exit(main())
