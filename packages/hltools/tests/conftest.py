"""hltools tests run the Helion kernels in Triton's CPU interpreter: TRITON_INTERPRET must be set
before triton (imported by helion / hlcore.scaled_mm) is first imported, so it is set here, at
conftest import time. An explicit TRITON_INTERPRET in the environment wins."""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")
