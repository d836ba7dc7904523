"""evalpack: evaluation databases whose answers are fixed before a row exists."""

__version__ = "0.1.0"

__all__ = ["__version__", "verify_questions"]


def verify_questions(con, questions, links=(), rotation="default"):
    """Check gold queries on any DuckDB connection; returns (kept, dropped with drop_reason)."""
    from evalpack.checks.verification import verify_questions as _verify

    return _verify(con, questions, links, rotation)
