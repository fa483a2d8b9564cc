"""``python -m hltools`` = the ``hltools`` console script."""

from hltools.cli import app

app()
