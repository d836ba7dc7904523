"""What goes wrong when publishing, for every module of publish/ to raise."""

from __future__ import annotations

from evalpack.core.errors import EvalpackError


class PublishError(EvalpackError):
    """A pack that cannot be published as asked (the message says what to do)."""
