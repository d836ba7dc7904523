"""The one exception type for errors a user can cause (bad spec, bad pack, bad input)."""

from __future__ import annotations


class EvalpackError(Exception):
    """A user-caused error. The message names the file, where in it, and what to do.

    The CLI prints the message without a traceback and exits with ``exit_code`` (2 by default).
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
