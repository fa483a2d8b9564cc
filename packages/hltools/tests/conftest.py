"""hltools tests run the Helion kernels on the CPU: in Triton's interpreter unless the environment
(or the root conftest) already chose Helion's own interpret mode (HELION_INTERPRET=1) or the GPU
(HL_TEST_GPU=1). TRITON_INTERPRET must be set before triton (imported by helion /
hlcore.scaled_mm) is first imported, so it is set here, at conftest import time."""

import os

if os.environ.get("HL_TEST_GPU") != "1" and os.environ.get("HELION_INTERPRET") != "1":
    os.environ.setdefault("TRITON_INTERPRET", "1")
