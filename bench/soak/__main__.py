"""``python -m bench.soak`` (the same as ``python -m bench soak``)."""

import sys

from bench.soak import main

sys.exit(main())
