"""The `evalpack` command line. Errors a user can cause print one message and exit 2.

Those errors are :class:`evalpack.core.errors.EvalpackError` and the standalone scorer's
:class:`evalpack.core.scoring.InputError` (EvalpackError is one of those): one line ``evalpack: error: ...``
naming the file and what to do, never a traceback. A file-system error nothing else caught
(a folder where a file is expected, a full disk) is reported the same way.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from importlib.metadata import entry_points
from pathlib import Path

from evalpack.core.errors import ERROR_PREFIX, EvalpackError
from evalpack.core.layout import PackLayout, rotation_name
from evalpack.core.scoring import (
    PUBLIC_KEY_ENV,
    RULES,
    InputError,
    OneLineParser,
    add_holdout_option,
    add_integrity_options,
    add_limit_options,
    add_threshold_option,
    check_report_file,
    error_text,
    printable,
    write_report,
)
from evalpack.dialects import SCORING_DIALECTS
from evalpack.pack.report import pack_facts, pack_html, score_html
from evalpack.spec.grammar import EXPORT_FORMATS

#: The entry-point group through which other packages of this distribution add subcommands.
COMMANDS = "evalpack.commands"


def _progress_printer(enabled: bool):
    if not enabled:
        return None

    def show(seed: int, table: str, rows: int) -> None:
        print(f"  {rotation_name(seed)}: {table} {rows:,} rows", file=sys.stderr, flush=True)

    return show


def _check_output(output: str, force: bool, inputs: list[str]) -> None:
    """Refuse, before any work, an output folder the command cannot or must not write (see
    :func:`evalpack.pack.folder.check_output`: the current folder or one holding it or an input, an existing
    folder without --force, anything but a pack or an empty folder with it, a path through a file)."""
    from evalpack.pack.folder import check_output

    check_output(output, force, inputs)


def _check_pack_folder(pack: str) -> None:
    path = Path(pack)
    if path.exists() and not path.is_dir():
        raise EvalpackError(f"{pack}: not a pack folder but a file; pass the folder `evalpack build -o` "
                            "or `evalpack import -o` wrote")


class _Parser(OneLineParser):
    prefix = ERROR_PREFIX


class _AtLeast(argparse.Action):
    """An integer option refused below ``minimum`` while the arguments are parsed (``type=int`` with it)."""

    def __init__(self, option_strings: list[str], dest: str, minimum: int = 0, **kwargs) -> None:
        super().__init__(option_strings, dest, **kwargs)
        self.minimum = minimum

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        if values < self.minimum:
            parser.error(f"{option_string} must be at least {self.minimum}, got {values}")
        setattr(namespace, self.dest, values)


def arrow_without_pandas() -> None:
    """Settle, before pandas is imported, that this process hands pyarrow no pandas objects.

    pyarrow imports pandas (0.3 to 0.8 s) the first time it builds an array, only to ask whether the input is a
    pandas object; the engine never passes one. With pandas unimportable for that first array, pyarrow records
    that it has no pandas to ask about; an explicit conversion (``to_pandas``) still imports it then. Only the
    ``evalpack`` process does this (:func:`console`), not a program that calls :func:`main`."""
    if "pandas" in sys.modules:
        return
    import pyarrow as pa

    class NoPandas:
        @staticmethod
        def find_spec(name: str, *_: object) -> None:
            if name == "pandas":
                raise ImportError("pandas is not used here")

    sys.meta_path.insert(0, NoPandas)  # type: ignore[arg-type]
    try:
        pa.array([0])
    finally:
        sys.meta_path.remove(NoPandas)  # type: ignore[arg-type]


def cmd_build(args: argparse.Namespace) -> int:
    from evalpack.build import build_pack
    from evalpack.checks.nearmiss.gate import gate_line

    _check_output(args.output, args.force, [args.spec])
    started = time.perf_counter()
    result = build_pack(args.spec, args.output, seed=args.seed, rotations=args.rotations, force=args.force,
                        jobs=args.jobs, progress=_progress_printer(sys.stderr.isatty() or args.verbose),
                        signing_key=args.signing_key or os.environ.get("EVALPACK_SIGNING_KEY"),
                        previous=args.previous)
    shipped = result.shipped
    dropped = [v for v in result.verdicts if not v.ships]
    print(f"built {result.path} from {result.spec.path} in {time.perf_counter() - started:.1f}s")
    print(f"  rotations: {', '.join(result.rows)}")
    for table in result.spec.tables:
        counts = {result.rows[r][table.name] for r in result.rows}
        print(f"  {table.name}: {', '.join(f'{c:,}' for c in sorted(counts))} rows per rotation")
    kinds = Counter(q.kind for q in shipped)
    print(f"  questions shipped: {len(shipped)} ({', '.join(f'{k} {n}' for k, n in sorted(kinds.items()))})")
    if result.declines:
        kinds = Counter(q.kind for q in result.declines)
        print(f"  unanswerable: {len(result.declines)} to decline ({', '.join(f'{k} {n}' for k, n in sorted(kinds.items()))}; "
              "manifest.json -> unanswerable gives each proof)")
    if result.selection:
        sel = result.selection
        mix = (" / ".join(f"{k} {v:g}" for k, v in sel.mix) + (" applied" if sel.mix_applied else " not applied: "
               + sel.note)) if sel.mix else "any"
        print(f"  selection: {sum(n for _, n in sel.chosen)} of {sum(n for _, n in sel.pool)} derived questions "
              f"(difficulty mix {mix})")
    levels = Counter(q.difficulty for q in shipped)
    skills = Counter(s for q in shipped for s in q.skills)
    print(f"  difficulty: {', '.join(f'{k} {levels[k]}' for k in ('simple', 'moderate', 'challenging'))}; skills: "
          f"{', '.join(f'{k} {n}' for k, n in sorted(skills.items()))}")
    if dropped:
        reasons = Counter(v.drop_kind for v in dropped)
        print(f"  questions dropped: {len(dropped)} ({', '.join(f'{r} {n}' for r, n in sorted(reasons.items()))}; "
              "see manifest.json -> dropped)")
    study = result.near_miss
    print(f"  near-miss study: {study['mutants_run']} mutants, {study['match_all_rate']:.2%} match on every rotation, "
          f"{study['match_first_rate']:.2%} on the first alone (manifest.json -> near_miss_study)")
    if line := gate_line(study.get("gate") or {}):
        print(f"  {line}")
    if result.spec.exports:
        print(f"  exports: {_exports_line(result.path, result.spec.exports)}")
    for warning in result.warnings:
        print(f"  warning: {warning}")
    held = sum(q.split == "holdout" for q in shipped)
    if held:
        from evalpack.core.scoring import holdout_key_beside

        print(f"  holdout: {held} questions; their gold SQL and answers are in {holdout_key_beside(result.path)} "
              "(private: keep it out of any public copy of the pack)")
    from evalpack.pack.attest import signature_note

    print(f"  attestation: {signature_note(result.path) or 'signed (check it with evalpack verify --public-key KEY)'}")
    print(f"  audit: {len(result.audit)} finding(s)" + ("" if not result.audit else "; run `evalpack audit PACK`"))
    for finding in result.audit:
        print(f"    {finding.question} {finding.kind}: {finding.message}")
    return 0


def _exports_line(pack: Path, formats: tuple[str, ...]) -> str:
    """What a build's ``exports:`` wrote and how each dialect verified, as manifest.json -> dialects records it."""
    dialects = PackLayout(pack).read_manifest().get("dialects") or {}
    verified = []
    for name, entry in dialects.items():
        if not isinstance(entry, dict) or "engine" not in entry:
            continue
        if not entry.get("verified_on_engine"):
            verified.append(f"{name}: not verified (no server)")
            continue
        dropped = f", {entry['dropped']} dropped" if entry["dropped"] else ""
        verified.append(f"{name}: {entry['verified']} of {entry['checked']} verified on {entry['engine']}{dropped}")
    return f"{', '.join(formats)} under exports/; {'; '.join(verified)} (manifest.json -> dialects)"


def cmd_score(args: argparse.Namespace) -> int:
    from evalpack.core.scoring import prestart_for, score_command

    # before any work, so that a report that cannot or must not be written costs no scoring run
    check_report_file(args.json, args.pack)
    check_report_file(args.html, args.pack, "--html")

    def render(report: dict) -> None:  # the page sees the report as the JSON report states it
        write_report(args.html, score_html(json.loads(json.dumps(report, default=str))))

    if args.dialect != "duckdb":  # the candidates run on SQLite or PostgreSQL; the rest is score_command's
        from evalpack.dialects.scoring import score_arguments

        return score_arguments(args, on_report=render if args.html else None)
    prestart_for(args.pack)
    return score_command(args.pack, args.candidates, json_path=args.json, rule=args.rule,
                         public_key=args.public_key, timeout=args.timeout, memory_mb=args.memory_mb,
                         threads=args.threads, run_timeout=args.run_timeout,
                         allow_unattested=args.allow_unattested, error_prefix=ERROR_PREFIX,
                         holdout_key=args.holdout_key, on_report=render if args.html else None,
                         min_accuracy=args.min_accuracy)


def cmd_report(args: argparse.Namespace) -> int:
    _check_pack_folder(args.pack)
    check_report_file(args.html, args.pack, "--html")
    facts = pack_facts(args.pack, public_key=args.public_key)
    write_report(args.html, pack_html(facts))
    print(printable(f"wrote {args.html}: pack {args.pack}, {len(facts['records'])} questions, "
                    f"{len(facts['findings'])} audit finding(s), attestation {facts['attestation']['status']}"))
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    from evalpack.core.scoring import prestart_for

    prestart_for(args.pack)  # the gold SQL reruns in a sandbox worker per rotation
    from evalpack.pack.attest import verify_command

    return verify_command(args.pack, public_key=args.public_key, allow_unattested=args.allow_unattested,
                          holdout_key=args.holdout_key)


def cmd_keygen(args: argparse.Namespace) -> int:
    from evalpack.pack.attest import keygen_command

    return keygen_command(args.directory, algorithm=args.algorithm, force=args.force)


def cmd_import(args: argparse.Namespace) -> int:
    from evalpack.interop.importer import import_command

    _check_output(args.output, args.force, [args.questions, args.data])
    return import_command(args.questions, data=args.data, output=args.output, force=args.force,
                          holdout=args.holdout, signing_key=args.signing_key or os.environ.get("EVALPACK_SIGNING_KEY"),
                          links=tuple(args.link or ()))


def cmd_audit(args: argparse.Namespace) -> int:
    from evalpack.core.scoring import prestart_for

    _check_pack_folder(args.pack)
    check_report_file(args.json, args.pack)
    # the pack's SQL runs in a sandbox worker per rotation: forked before the audit's imports start threads
    # (NumPy's, for one)
    prestart_for(args.pack)
    from evalpack.checks.audit import audit_command

    return audit_command(args.pack, json_path=args.json)


def cmd_serve(args: argparse.Namespace) -> int:
    from evalpack.agent.serve import ServeOptions, serve_command
    from evalpack.core.scoring import Limits

    options = ServeOptions(transport=args.transport, host=args.host, port=args.port, rotation=args.rotation,
                           episode=args.episode, max_rows=args.max_rows, workers=args.workers,
                           feedback=not args.no_feedback, holdout_feedback=args.holdout_feedback,
                           holdout_attempts=args.holdout_attempts, episode_max_mb=args.episode_max_mb,
                           idle_timeout=args.idle_timeout, rule=args.rule,
                           limits=Limits(args.timeout, args.memory_mb, args.threads, args.run_timeout),
                           holdout_key=args.holdout_key, public_key=args.public_key,
                           allow_unattested=args.allow_unattested, evidence=not args.no_evidence)
    return serve_command(args.pack, options)


def cmd_export(args: argparse.Namespace) -> int:
    from evalpack.interop.exports import export_command

    return export_command(args.pack, args.format, args.output, postgres_dsn=args.postgres_dsn,
                          evidence=not args.no_evidence)


def _add_build_command(sub: argparse._SubParsersAction) -> None:
    """`evalpack build` and its options."""
    b = sub.add_parser("build", help="build a pack from a spec")
    b.add_argument("spec")
    b.add_argument("-o", "--output", required=True, help="pack folder to create")
    b.add_argument("--seed", type=int, action=_AtLeast, minimum=0, help="base seed (overrides the spec's seed)")
    b.add_argument("--rotations", type=int, action=_AtLeast, minimum=1,
                   help="number of rotations (overrides the spec)")
    b.add_argument("--force", action="store_true",
                   help="replace an existing pack (only a folder evalpack wrote, or an empty one)")
    b.add_argument("--jobs", type=int, action=_AtLeast, minimum=1, default=os.cpu_count() or 1,
                   help="rotations generated in parallel")
    b.add_argument("-v", "--verbose", action="store_true", help="show progress per rotation and table")
    b.add_argument("--previous", metavar="PACK",
                   help="the pack of the version this one follows: its questions keep their splits (default: the "
                        "pack being replaced at -o)")
    b.add_argument("--signing-key", help="private key (PEM) to sign the attestation; default $EVALPACK_SIGNING_KEY")
    b.set_defaults(func=cmd_build)


def _add_score_command(sub: argparse._SubParsersAction) -> None:
    """`evalpack score` and its options."""
    s = sub.add_parser("score", help="score candidate SQL against a pack (same rules as the pack's verify.py)")
    s.add_argument("pack")
    s.add_argument("--candidates", required=True, help="JSONL, JSON list, or JSON object of id -> SQL")
    s.add_argument("--json", help="write the full report as JSON to this file")
    s.add_argument("--html", help="also write the report as one self-contained HTML page (charts, wrong answers)")
    s.add_argument("--rule", choices=RULES, default="spider", help="rule for result-set questions")
    add_threshold_option(s)
    add_integrity_options(s)
    add_holdout_option(s)
    add_limit_options(s)
    s.add_argument("--dialect", choices=SCORING_DIALECTS, default="duckdb",
                   help="the engine the candidates' SQL is written for and runs on (default duckdb); sqlite: the "
                        "rotation's SQLite database, read-only; postgres: a read-only role on --postgres-dsn")
    s.add_argument("--postgres-dsn", metavar="DSN",
                   help="the PostgreSQL server for --dialect postgres (default $EVALPACK_POSTGRES_DSN), as "
                        "postgresql://USER@HOST:PORT/DB with a role that may create databases and roles")
    s.set_defaults(func=cmd_score)


def _add_report_command(sub: argparse._SubParsersAction) -> None:
    """`evalpack report` and its options."""
    r = sub.add_parser("report", help="write a pack's report as one self-contained HTML page (questions, "
                                      "near-miss study, audit, attestation)")
    r.add_argument("pack")
    r.add_argument("--html", required=True, help="the page to write (e.g. PACK.report.html, beside the pack)")
    r.add_argument("--public-key", default=os.environ.get(PUBLIC_KEY_ENV) or None,
                   help=f"PEM public key to check the attestation's signature with (default ${PUBLIC_KEY_ENV}); "
                        "the page shows the attestation's status either way")
    r.set_defaults(func=cmd_report)


def _add_verify_command(sub: argparse._SubParsersAction) -> None:
    """`evalpack verify` and its options."""
    v = sub.add_parser("verify", help="check a pack's attestation, file hashes and gold SQL")
    v.add_argument("pack")
    add_integrity_options(v)
    add_holdout_option(v)
    v.set_defaults(func=cmd_verify)


def _add_keygen_command(sub: argparse._SubParsersAction) -> None:
    """`evalpack keygen` and its options."""
    k = sub.add_parser("keygen", help="write a signing key pair (private key mode 0600)")
    k.add_argument("directory")
    k.add_argument("--algorithm", choices=("ed25519", "ecdsa-p256"), default="ed25519")
    k.add_argument("--force", action="store_true", help="overwrite an existing key pair")
    k.set_defaults(func=cmd_keygen)



def _add_import_command(sub: argparse._SubParsersAction) -> None:
    """`evalpack import` and its options."""
    i = sub.add_parser("import", help="make a pack from questions that arrive from outside plus a database")
    i.add_argument("questions", help="JSONL, JSON, or CSV with a header")
    i.add_argument("--data", required=True, help="DuckDB file, SQLite file, or folder of Parquet/CSV tables")
    i.add_argument("-o", "--output", required=True, help="pack folder to create")
    i.add_argument("--force", action="store_true",
                   help="replace an existing pack (only a folder evalpack wrote, or an empty one)")
    i.add_argument("--holdout", type=float, default=0.0, help="fraction frozen into the holdout split")
    i.add_argument("--link", action="append", metavar="CHILD.COL=PARENT.COL",
                   help="a link the orphan check follows (repeatable), before the database's foreign keys and "
                        "inference, e.g. --link orders.customer_id=customers.customer_id")
    i.add_argument("--signing-key", help="private key (PEM) to sign the attestation")
    i.set_defaults(func=cmd_import)


def _add_audit_command(sub: argparse._SubParsersAction) -> None:
    """`evalpack audit` and its options."""
    a = sub.add_parser("audit",
                                        help="audit a pack's golden queries (empty, drift, orphans, ties, seals)")
    a.add_argument("pack")
    a.add_argument("--json", help="write the findings as JSON to this file")
    a.set_defaults(func=cmd_audit)


def _add_serve_command(sub: argparse._SubParsersAction) -> None:
    """`evalpack serve` and its options."""
    sv = sub.add_parser("serve", help="serve a pack to a data agent over MCP (stdio or streamable HTTP): its tables, "
                                      "a read-only SQL sandbox, its questions and the grader")
    sv.add_argument("pack")
    sv.add_argument("--transport", choices=("stdio", "http"), default="stdio",
                    help="stdio (default: the client starts the server) or streamable HTTP at http://HOST:PORT/mcp")
    sv.add_argument("--host", default="127.0.0.1", help="HTTP: a loopback address (default 127.0.0.1)")
    sv.add_argument("--port", type=int, default=8000, help="HTTP: the port (default 8000; 0: any free port)")
    sv.add_argument("--rotation", help="the rotation the agent explores (default: the first); answers are graded on "
                                       "every rotation")
    sv.add_argument("--episode", metavar="FILE",
                    help="the episode file, JSON Lines appended to: every call, and each episode's answers and "
                         "report (default: PACK.episodes.jsonl beside the pack)")
    sv.add_argument("--max-rows", type=int, default=200, help="rows run_sql returns at most (default 200)")
    sv.add_argument("--workers", type=int, default=2, help="sandbox processes per rotation (default 2)")
    sv.add_argument("--no-feedback", action="store_true",
                    help="submit_answer says only that the answer was recorded, not whether it is correct, and "
                         "end_episode gives no counts of correct answers")
    sv.add_argument("--holdout-feedback", action="store_true",
                    help="tell the agent whether a holdout question's answer is correct, and the holdout's counts at "
                         "the episode's end (default: only that the answer was recorded: the holdout stays secret)")
    sv.add_argument("--holdout-attempts", type=int, default=3, metavar="N",
                    help="answers a holdout question takes per episode, the last counting; beyond, submit_answer is "
                         "the call's error and grades nothing (default 3)")
    sv.add_argument("--episode-max-mb", type=float, default=10.0, metavar="MB",
                    help="megabytes an episode's call records may take of the episode file; its calls beyond are "
                         "counted, not logged (default 10; the start and end records are always written)")
    sv.add_argument("--idle-timeout", type=float, default=1800.0,
                    help="HTTP: seconds a session may go without a request in flight (nor an open stream) before it "
                         "closes and its episode ends (default 1800)")
    sv.add_argument("--no-evidence", action="store_true",
                    help="list_questions gives every question's evidence as null (BIRD's setting without it); the "
                         "episode reports say \"evidence\": \"without\"")
    sv.add_argument("--rule", choices=RULES, default="spider", help="rule for result-set questions")
    add_integrity_options(sv)
    add_holdout_option(sv)
    add_limit_options(sv)
    sv.set_defaults(func=cmd_serve)


def _add_export_command(sub: argparse._SubParsersAction) -> None:
    """`evalpack export` and its options."""
    ex = sub.add_parser("export", help="write a pack where people already evaluate: a SQLite database or PostgreSQL "
                                       "dump per rotation, or the BIRD or Spider layout (gold SQL verified there)")
    ex.add_argument("pack")
    ex.add_argument("--format", required=True, choices=EXPORT_FORMATS,
                    help="sqlite | postgres | bird | spider")
    ex.add_argument("-o", "--output", required=True, help="folder to create (new or empty)")
    ex.add_argument("--postgres-dsn", metavar="DSN",
                    help="PostgreSQL server that verifies the postgres format's gold SQL (default "
                         "$EVALPACK_POSTGRES_DSN; without one the dumps are written and no SQL is)")
    ex.add_argument("--no-evidence", action="store_true",
                    help="export the questions without their evidence (BIRD's setting without it: dev.json's "
                         "evidence \"\", questions.jsonl's null); export.json says which")
    ex.set_defaults(func=cmd_export)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="evalpack", description="Evaluation databases with answers fixed in advance.")
    sub = parser.add_subparsers(dest="command", required=True)
    _add_build_command(sub)
    _add_score_command(sub)
    _add_report_command(sub)
    _add_verify_command(sub)
    _add_keygen_command(sub)
    # commands of the layers above the engine (`publish`) register themselves: the engine imports none of them
    for command in sorted(entry_points(group=COMMANDS), key=lambda ep: ep.name):
        command.load()(sub)
    _add_import_command(sub)
    _add_audit_command(sub)
    _add_serve_command(sub)
    _add_export_command(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except InputError as exc:  # EvalpackError included
        print(error_text(exc, ERROR_PREFIX), file=sys.stderr)
        return getattr(exc, "exit_code", 2)
    except BrokenPipeError:  # output piped into a reader that stopped early (e.g. head)
        sys.stderr.close()
        return 1
    except OSError as exc:  # a file-system error the engine did not name itself: still one line, with the path
        if not exc.filename:
            raise
        print(printable(f"{ERROR_PREFIX}{exc.filename}: {exc.strerror or exc}; check that path (a file where a "
                        "folder is expected, permissions, free space)"), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def console() -> int:
    """The ``evalpack`` command: :func:`main` in a process of its own (``build`` without pandas' import)."""
    if sys.argv[1:2] == ["build"]:
        arrow_without_pandas()
        import gc

        import evalpack.build  # noqa: F401
        # what the imports made lives as long as the process: garbage collection need not walk it again and
        # again (a build's collections, here and in the workers forked from here, cost about 5% of its CPU time)
        gc.freeze()
    return main()


if __name__ == "__main__":
    sys.exit(console())
