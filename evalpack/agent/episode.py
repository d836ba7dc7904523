"""Episodes of ``evalpack serve``: what one agent did in one session, logged as it happens, and its report.

The episode file is JSON Lines, appended to by every episode of a server (each line names its episode):
``{"event": "start", ...}`` when an episode's first request arrives, ``{"event": "call", "tool", "arguments",
"seconds", "result_bytes", "error"}`` for every tool call and every listing or reading of tools, resources and
prompts (``tool``: ``list_tools``, ``list_resources``, ``read_resource`` with ``{"uri"}``, ...; ``arguments`` is
always an object), and ``{"event": "end", "answers", "report", "calls",
"calls_not_logged"}`` when the episode ends. ``answers`` are the episode's last answers per question in the
candidates form ``evalpack score`` reads (``{"id", "sql"}`` or ``{"id", "declined": true}``), and ``report`` is the
JSON ``evalpack score --json`` writes for those answers, with ``"evidence": "with"`` or ``"without"`` (whether the
agent was given the questions' evidence: ``evalpack serve --no-evidence``; in the start record too).

The file is bounded however an agent calls: a call record is at most :data:`CALL_RECORD_BYTES` (a longer one has
its arguments logged by their start and length, its error cut), and an episode's call records take at most its
cap (``--episode-max-mb``) of the file; its calls beyond are counted (``calls_not_logged`` in its end record), not
logged, and the server says so once on stderr. The start and end records are always written: the end record's
answers are the evaluation, bounded by the pack's questions and the longest SQL accepted.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalpack.agent.grader import Graded, Grader
from evalpack.core.errors import EvalpackError
from evalpack.core.scoring import format_report, holdout_key_beside, jsonable, preview, printable

EPISODES_SUFFIX = ".episodes.jsonl"
CALL_RECORD_BYTES = 128 * 1024  # a call record longer than this has its arguments logged by start and length
LOGGED_ERROR_CHARS = 2_000  # and its error cut to this many characters
DEFAULT_EPISODE_MAX_MB = 10.0  # an episode's call records take at most this much of the episode file


def episode_log_beside(pack: str | Path) -> Path:
    """Where ``evalpack serve`` logs its episodes unless told: ``<pack folder>.episodes.jsonl`` beside the
    pack (never inside it, where every file is attested)."""
    folder = Path(pack).absolute()
    return folder.with_name(folder.name + EPISODES_SUFFIX)


def refuse_inside_pack(path: str | Path, pack: str | Path, holdout_key: str | Path | None = None) -> None:
    """EvalpackError (one line, naming ``--episode``) when the episode file ``path`` would be written inside the
    pack folder or inside its holdout answer key (the folder beside the pack, :func:`holdout_key_beside`, and
    ``holdout_key``, the one ``--holdout-key`` names), links followed (a linked folder, a link to a file there, ``..``),
    or is a hard link to one of their files: every file of the pack is attested, and one more, or one changed,
    fails its verification; an episode record appended to the key's ``holdout.jsonl`` corrupts the key."""
    try:
        folder, where = Path(pack).resolve(), Path(path).resolve()
    except (OSError, RuntimeError) as exc:  # a loop of links
        raise EvalpackError(printable(f"--episode {path}: cannot follow its links ({exc}); choose another "
                                      "--episode")) from None
    advice = f"; write the episode file outside the pack, e.g. --episode {episode_log_beside(pack)} (the default)"
    if where == folder or folder in where.parents:
        what = "is the pack folder itself" if where == folder else f"is inside the pack ({pack})"
        raise EvalpackError(printable(f"--episode {path}: {what}, whose files are attested: an episode file there "
                                      f"makes the pack fail its verification{advice}"))
    # the key beside the pack as given and as resolved (a linked pack), and the one given; realpath: a loop of links
    # in a key's path leaves it as it is (the grader reports it), an episode file is not refused for it
    keys = dict.fromkeys(Path(os.path.realpath(key)) for key in (
        holdout_key_beside(pack), holdout_key_beside(folder), *(() if holdout_key is None else (holdout_key,))))
    key_advice = (f"; write the episode file outside the pack and its answer key, e.g. --episode "
                  f"{episode_log_beside(pack)} (the default)")
    for key in keys:
        if where == key or key in where.parents:
            what = "is the folder of" if where == key else "is inside"
            raise EvalpackError(printable(f"--episode {path}: {what} the pack's holdout answer key ({key}): "
                                          f"episode records appended there corrupt the key{key_advice}"))
    try:
        found = where.stat()
    except OSError:
        return
    if found.st_nlink < 2:
        return
    for top, _, names in os.walk(folder):
        for name in names:
            if _same_file(found, os.path.join(top, name)):
                raise EvalpackError(printable(f"--episode {path}: is a hard link to {Path(top, name)}, a file inside "
                                              f"the pack ({pack}): appending to it makes the pack fail its "
                                              f"verification{advice}"))
    for key in keys:  # evalpack writes a key's files at its top
        try:
            names = os.listdir(key)
        except OSError:
            continue
        for name in names:
            if _same_file(found, key / name):
                raise EvalpackError(printable(f"--episode {path}: is a hard link to {key / name}, a file of the "
                                              f"pack's holdout answer key: appending to it corrupts the "
                                              f"key{key_advice}"))


def _same_file(found: os.stat_result, path: str | Path) -> bool:
    """Whether ``path`` (not followed if a link) is the file ``found`` is the status of."""
    try:
        return os.path.samestat(found, os.stat(path, follow_symlinks=False))
    except OSError:
        return False


def argument_size(value: Any) -> int:
    """A tool argument's length: a text's characters, anything else's as JSON text."""
    return len(value) if isinstance(value, str) else len(json.dumps(value, default=str))


def json_line(record: dict[str, Any]) -> bytes:
    """``record`` as one line of the episode file (a lone surrogate from an agent's text written as its escape)."""
    return (json.dumps(record, ensure_ascii=False, default=str) + "\n").encode("utf-8", "backslashreplace")


def call_line(record: dict[str, Any]) -> bytes:
    """A call record as one line of at most :data:`CALL_RECORD_BYTES`: whole when it fits; else each argument by its
    start and length (:func:`evalpack.core.scoring.preview`) and the error cut to :data:`LOGGED_ERROR_CHARS`; else (a
    deeply nested value) each argument by its length alone."""
    data = json_line(record)
    if len(data) <= CALL_RECORD_BYTES:
        return data
    error = record.get("error")
    if isinstance(error, str) and len(error) > LOGGED_ERROR_CHARS:
        error = f"{error[:LOGGED_ERROR_CHARS]}... ({len(error):,} characters)"
    arguments = record.get("arguments") or {}
    cut = {**record, "error": error, "arguments": {k: preview(jsonable(v)) for k, v in arguments.items()}}
    data = json_line(cut)
    if len(data) <= CALL_RECORD_BYTES:
        return data
    cut["arguments"] = {k: f"({argument_size(v):,} characters as JSON, not logged)" for k, v in arguments.items()}
    return json_line(cut)


@dataclass
class CallCount:
    """An episode's tool calls so far, the bytes its call records took, and those not logged (its cap reached)."""

    calls: int = 0
    logged_bytes: int = 0
    not_logged: int = 0


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

    def write(self, record: dict[str, Any] | bytes) -> None:
        """Append ``record`` as one line (:func:`json_line`; bytes: a line made already)."""
        data = record if isinstance(record, bytes) else json_line(record)
        with self._lock:
            written = 0
            while written < len(data):  # a raw file may take part of a large record at a time
                written += self._file.write(data[written:])

    def close(self) -> None:
        with self._lock:
            self._file.close()


class Episode:
    """One agent's episode: its answers (the last per question wins), the answers each question took, and the run
    time its queries took."""

    def __init__(self, episode_id: str, grader: Grader) -> None:
        self.id, self.grader = episode_id, grader
        self.started = time.perf_counter()
        self.graded: dict[str, Graded] = {}
        self.attempts: dict[str, int] = {}
        self.grading_seconds = 0.0
        self.query_seconds = 0.0
        self.ended = False
        self.lock = threading.Lock()

    def budget(self) -> float:
        """Seconds of query time left to this episode (``--run-timeout`` counts per episode)."""
        with self.lock:
            return self.grader.limits.run_timeout - self.query_seconds

    def attempt(self, question_id: str, limit: int) -> int:
        """Take one of the ``limit`` answers ``question_id`` may have in this episode; how many are left after it.
        EvalpackError naming the limit (and nothing taken) when none is left."""
        with self.lock:
            used = self.attempts.get(question_id, 0)
            if used >= limit:
                raise EvalpackError(f"question {printable(question_id)}: a holdout question takes at most {limit} "
                                    f"answer{'s' if limit != 1 else ''} per episode (--holdout-attempts {limit}) and "
                                    "this one has had them; nothing was graded, and the last answer recorded counts")
            self.attempts[question_id] = used + 1
            return limit - used - 1

    def give_back(self, question_id: str) -> None:
        """Return an answer taken by :meth:`attempt` (grading it failed)."""
        with self.lock:
            self.attempts[question_id] = max(0, self.attempts.get(question_id, 0) - 1)

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
    """The open episodes of one server, by id; each is logged to ``log`` and ends once (:meth:`end`). An episode's
    call records take at most ``max_call_bytes`` of the log (calls after its end, or without an episode, count too);
    its calls beyond are counted, not logged. ``evidence`` (``with`` or ``without``: whether the agent was given the
    questions' evidence) is in each episode's start record and report."""

    def __init__(self, grader: Grader, log: EpisodeLog, rotation: str, transport: str,
                 max_call_bytes: int = int(DEFAULT_EPISODE_MAX_MB * 2**20), evidence: str = "with") -> None:
        self.grader, self.log, self.rotation, self.transport = grader, log, rotation, transport
        self.max_call_bytes, self.evidence = max_call_bytes, evidence
        self._open: dict[str, Episode] = {}
        self._ended: set[str] = set()
        self._counts: dict[str, CallCount] = {}
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
                            "rotation": self.rotation, "transport": self.transport, "evidence": self.evidence})
            return episode, True

    def call(self, episode_id: str, tool: str, arguments: dict[str, Any], seconds: float, result_bytes: int,
             error: str | None) -> None:
        """Log one tool call (:func:`call_line`) while the episode's call records fit in its cap; count it either
        way. The first call not logged says so on stderr."""
        data = call_line({"event": "call", "episode": episode_id, "tool": tool, "arguments": arguments,
                          "seconds": round(seconds, 6), "result_bytes": result_bytes, "error": error})
        with self._lock:
            count = self._counts.setdefault(episode_id, CallCount())
            count.calls += 1
            logged = not count.not_logged and count.logged_bytes + len(data) <= self.max_call_bytes
            if logged:
                count.logged_bytes += len(data)
            else:
                count.not_logged += 1
            first_unlogged = count.not_logged == 1 and not logged
        if logged:
            self.log.write(data)
        elif first_unlogged:
            print(printable(f"evalpack serve: episode {episode_id}: its call records reached "
                            f"{self.max_call_bytes / 2**20:g} MB of the episode file (--episode-max-mb); its later "
                            f"calls are counted, not logged (its end record says how many)"), file=sys.stderr,
                  flush=True)

    def end(self, episode_id: str) -> dict[str, Any] | None:
        """End the episode: log its answers and report (the form of ``evalpack score --json``) and return the
        report; None when it never started or has ended already."""
        with self._lock:
            episode = self._open.pop(episode_id, None)
            if episode is None:
                return None
            self._ended.add(episode_id)
            count = self._counts.get(episode_id) or CallCount()
            calls, not_logged = count.calls, count.not_logged
        with episode.lock:
            episode.ended = True
            graded = dict(episode.graded)
            seconds = episode.grading_seconds
        report = self.grader.report(graded, seconds, {"file": str(self.log.path), "form": "mcp-episode",
                                                      "episode": episode_id}) | {"evidence": self.evidence}
        self.log.write({"event": "end", "episode": episode_id, "answers": episode.answers(), "report": report,
                        "text": format_report(report), "calls": calls, "calls_not_logged": not_logged})
        return report

    def end_all(self) -> list[tuple[str, dict[str, Any]]]:
        """End every open episode (the server stops); (id, report) of each."""
        with self._lock:
            ids = list(self._open)
        return [(i, report) for i in ids if (report := self.end(i)) is not None]
