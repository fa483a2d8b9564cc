"""``python -m hltools.e2e worker ...``: one engine run (:func:`hltools.e2e.worker.main`)."""

import sys

from hltools.e2e.worker import main

sys.exit(main())
