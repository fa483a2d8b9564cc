"""hlvllm: a vLLM plugin that runs decode-size quantized linear layers with Helion kernels.

Importing this package registers nothing; vLLM calls :func:`hlvllm.plugin.register` through the
``vllm.general_plugins`` entry point. Enable with ``HL_LINEAR_BACKEND=helion``.
"""

__version__ = "0.1.0"
