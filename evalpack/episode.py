"""Episodes of ``evalpack serve``: what one agent did in one session, logged as it happens, and its report.

The episode file is JSON Lines, appended to by every episode of a server (each line names its episode):
``{"event": "start", ...}`` when an episode's first call arrives, ``{"event": "call", "tool", "arguments",
"seconds", "result_bytes", "error"}`` for every tool call, and ``{"event": "end", "answers", "report"}`` when
the episode ends. ``answers`` are the episode's last answers per question in the candidates form ``evalpack
score`` reads (``{"id", "sql"}`` or ``{"id", "declined": true}``), and ``report`` is the JSON ``evalpack score
--json`` writes for those answers.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

from evalpack.errors import EvalpackError
from evalpack.grader import Graded, Grader
from evalpack.scoring import format_report

EPISODES_SUFFIX = ".episodes.jsonl"


def episode_log_beside(pack: str | Path) -> Path:
    """Where ``evalpack serve`` logs its episodes unless told: ``<pack folder>.episodes.jsonl`` beside the
    pack (never inside it, where every file is attested)."""
    folder = Path(pack).absolute()
    return folder.with_name(folder.name + EPISODES_SUFFIX)


class EpisodeLog:
    """The episode file, opened for appending; one JSON object per line, written whole under a lock."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        if self.path.is_dir():
            raise EvalpackError(f"{path}: is a folder; pass a file for --episode, e.g. --episode episodes.jsonl")
        try:
            # unbuffered: each record goes to the file in one write, so that a reader sees it whole sooner
            self._file = open(self.path, "ab", buffering=0)  # noqa: SIM115 - held open for the server's life
        except OSError as exc:
            raise EvalpackError(f"{path}: cannot write the episode file ({exc.strerror or exc}); choose another "
                                "--episode") from None
        self._lock = threading.Lock()

    def write(self, record: dict[str, Any]) -> None:
        """Append ``record`` as one line (a lone surrogate from an agent's text is written as its escape)."""
        data = (json.dumps(record, ensure_ascii=False, default=str) + "\n").encode("utf-8", "backslashreplace")
        with self._lock:
            written = 0
            while written < len(data):  # a raw file may take part of a large record at a time
                written += self._file.write(data[written:])

    def close(self) -> None:
        with self._lock:
            self._file.close()


class Episode:
    """One agent's episode: its answers (the last per question wins) and the run time its queries took."""

    def __init__(self, episode_id: str, grader: Grader) -> None:
        self.id, self.grader = episode_id, grader
        self.started = time.perf_counter()
        self.graded: dict[str, Graded] = {}
        self.grading_seconds = 0.0
        self.query_seconds = 0.0
        self.ended = False
        self.lock = threading.Lock()

    def budget(self) -> float:
        """Seconds of query time left to this episode (``--run-timeout`` counts per episode)."""
        with self.lock:
            return self.grader.limits.run_timeout - self.query_seconds

    def record(self, graded: Graded, seconds: float) -> None:
        """Keep ``graded`` as the episode's answer to its question (replacing an earlier one)."""
        with self.lock:
            self.graded.pop(graded.question_id, None)  # the answers keep the order of their last submission
            self.graded[graded.question_id] = graded
            self.grading_seconds += seconds
            self.query_seconds += graded.query_seconds

    def answers(self) -> list[dict[str, Any]]:
        """The last answer per question, as ``evalpack score --candidates`` reads them."""
        with self.lock:
            graded = list(self.graded.values())
        return [{"id": g.question_id, "sql": g.sql} if g.sql is not None else {"id": g.question_id, "declined": True}
                for g in graded]


class Episodes:
    """The open episodes of one server, by id; each is logged to ``log`` and ends once (:meth:`end`)."""

    def __init__(self, grader: Grader, log: EpisodeLog, rotation: str, transport: str) -> None:
        self.grader, self.log, self.rotation, self.transport = grader, log, rotation, transport
        self._open: dict[str, Episode] = {}
        self._ended: set[str] = set()
        self._lock = threading.Lock()

    def open(self, episode_id: str) -> tuple[Episode, bool]:
        """The episode ``episode_id`` and whether this call started it (its first); EvalpackError once it ended."""
        with self._lock:
            if episode_id in self._ended:
                raise EvalpackError(f"episode {episode_id} has ended; its answers are graded and final. Open a new "
                                    "session to start another episode")
            episode = self._open.get(episode_id)
            if episode is not None:
                return episode, False
            episode = self._open[episode_id] = Episode(episode_id, self.grader)
            self.log.write({"event": "start", "episode": episode_id, "pack": str(self.grader.pack),
                            "rotation": self.rotation, "transport": self.transport})
            return episode, True

    def call(self, episode_id: str, tool: str, arguments: dict[str, Any], seconds: float, result_bytes: int,
             error: str | None) -> None:
        """Log one tool call."""
        self.log.write({"event": "call", "episode": episode_id, "tool": tool, "arguments": arguments,
                        "seconds": round(seconds, 6), "result_bytes": result_bytes, "error": error})

    def end(self, episode_id: str) -> dict[str, Any] | None:
        """End the episode: log its answers and report (the form of ``evalpack score --json``) and return the
        report; None when it never started or has ended already."""
        with self._lock:
            episode = self._open.pop(episode_id, None)
            if episode is None:
                return None
            self._ended.add(episode_id)
        with episode.lock:
            episode.ended = True
            graded = dict(episode.graded)
            seconds = episode.grading_seconds
        report = self.grader.report(graded, seconds, {"file": str(self.log.path), "form": "mcp-episode",
                                                      "episode": episode_id})
        self.log.write({"event": "end", "episode": episode_id, "answers": episode.answers(), "report": report,
                        "text": format_report(report)})
        return report

    def end_all(self) -> list[tuple[str, dict[str, Any]]]:
        """End every open episode (the server stops); (id, report) of each."""
        with self._lock:
            ids = list(self._open)
        return [(i, report) for i in ids if (report := self.end(i)) is not None]
