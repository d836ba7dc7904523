"""The one exception type for errors a user can cause (bad spec, bad pack, bad input).

``EvalpackError`` is a kind of :class:`evalpack.core.scoring.InputError`, the input error of the standalone
scorer (which cannot import this module, since it is copied into every pack as ``verify.py``): catching
``InputError`` catches both, and the CLI handles both the same way.
"""

from __future__ import annotations

from evalpack.core.scoring import InputError

# how every command starts the one line it prints for an error a user can fix (then exit 2)
ERROR_PREFIX = "evalpack: error: "


class EvalpackError(InputError):
    """A user-caused error. The message names the file, where in it, and what to do.

    The CLI prints the message without a traceback and exits with ``exit_code`` (2 by default), as it
    does for any :class:`~evalpack.core.scoring.InputError`.
    """

    def __init__(self, message: str, exit_code: int = 2) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class SpecError(EvalpackError):
    """A spec file that cannot be built: names the file, the line and the key path."""

    def __init__(self, file: str, line: int | None, path: str, message: str) -> None:
        where = f"{file}:{line}" if line else file
        key = f" {path}:" if path else ""
        super().__init__(f"{where}:{key} {message}")
        self.file = file
        self.line = line
        self.path = path
        self.detail = message

    def __reduce__(self):
        # raised in a build's worker process, it must cross back whole (the default rebuilds it from args alone)
        return SpecError, (self.file, self.line, self.path, self.detail)
