"""The ``hltools`` commands, one module each: a short typer function over library calls, with the
options of :mod:`hltools.options`. :mod:`hltools.cli` registers them on the app.

Heavy imports (torch, helion, vLLM, matplotlib) happen inside the commands, so ``--help`` is fast and
``TRITON_INTERPRET`` can be set before Triton is imported.
"""
