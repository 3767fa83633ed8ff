"""The `lsm` command line: one argparse tree built from a list of command modules.

Each module in `COMMAND_MODULES` has ``register(subparsers)``, which adds its command (or group of
commands, e.g. ``lsm sst show|scan|verify|layout``) and sets ``func=handler`` on every leaf parser; a
handler takes the parsed arguments and returns the exit status. To add a command, write
``tools/cmd_<name>.py`` with a ``register`` function and append it here.

Exit status: 0 success; 1 a verification found a problem (``sst verify``, ``check``, ...); 2 a usage
error or input that cannot be read (missing path, not an SST or database, damaged file, newer format);
3 an internal error (a bug: set LSM_TRACEBACK=1 to see the traceback). Errors are one line on stderr,
``lsm: error: ...``, never a traceback; with ``--verbose`` (anywhere on the command line) the chain of
errors behind it follows, one ``caused by:`` entry each (an object store's whole answer, credentials
replaced by ``***``).

Every argument that names a database, a file or a directory (`LOCATION_ARGS`) is checked before the
command runs (`storage.objstore_config.check_location`): a malformed URL is one line, and nothing is
created or opened.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from formats.errors import LsmError
from tools import render

COMMAND_MODULES: tuple[str, ...] = (
    "tools.cmd_sst",
    "tools.cmd_manifest",
    "tools.cmd_wal",
    "tools.cmd_db",
    "tools.cmd_write",
    "tools.cmd_dump",
    "tools.cmd_bench",
    "tools.cmd_compact",
    "tools.cmd_time",
    "tools.cmd_ingest",
    "tools.cmd_remap",
    "tools.cmd_log",
    "tools.cmd_simulate",
    "tools.cmd_s3",
    "tools.cmd_checkpoint",
)

# the parsed arguments that name a database, a file or a directory; an ingest's SOURCE is one unless a
# --source factory takes it
LOCATION_ARGS = ("path", "paths", "file", "out", "dir", "spec")
SOURCE_KINDS = ("partitioned-log", "database-log")

EXIT_OK = 0
EXIT_PROBLEM = 1
EXIT_BAD_INPUT = 2
EXIT_INTERNAL = 3


class UsageError(Exception):
    """A command line argparse rejects; rendered as one line and exit status 2."""

    def __init__(self, prog: str, message: str) -> None:
        super().__init__(message)
        self.prog = prog


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are exceptions, so `run` can print them as one line."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(self.prog, message)


class _VersionAction(argparse.Action):
    """--version, looking the version up only when asked (importlib.metadata is slow to import)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kw: object) -> None:
        super().__init__(option_strings, dest, nargs=0, help="print the version and exit")

    def __call__(self, parser, namespace, values, option_string=None) -> None:  # type: ignore[override]
        try:
            from importlib.metadata import version

            v = version("lsm-sim")
        except Exception:  # noqa: BLE001 - an uninstalled tree still runs
            v = "unknown"
        sys.stdout.write(f"lsm {v}\n")
        parser.exit(0)


def docs_dir() -> str | None:
    """The directory holding the docs (cli.md, spark.md, ...): the checkout's docs/ when this runs from a
    source tree (or an editable install of one), else the copy a wheel installs under
    ``<prefix>/share/doc/lsm-sim/docs`` (pyproject.toml's data-files, for a virtualenv or a --user
    install); None when neither exists."""
    import sysconfig
    from pathlib import Path

    candidates = [Path(__file__).resolve().parents[1] / "docs"]
    for scheme in (None, f"{os.name}_user"):
        try:
            data = sysconfig.get_path("data", scheme) if scheme else sysconfig.get_path("data")
        except KeyError:  # no user scheme on this platform
            continue
        candidates.append(Path(data) / "share" / "doc" / "lsm-sim" / "docs")
    return next((str(d) for d in candidates if (d / "cli.md").is_file()), None)


def docs_epilog() -> str:
    """The last line of ``lsm --help``: where the reference of every command is, on this installation."""
    where = docs_dir()
    docs = (
        f"Docs: {os.path.join(where, 'cli.md')}\n(every command; the other guides beside it, README.md one level up)"
        if where is not None
        else "Docs: docs/cli.md of the lsm-sim source (not installed here)"
    )
    return f"Run 'lsm COMMAND --help' for the options of a command.\n{docs}"


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="lsm",
        description="Inspect and verify lsm-sim databases and the files they are made of.",
        epilog=docs_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,  # a path in the epilog is never broken
    )
    parser.add_argument("--version", action=_VersionAction)
    parser.add_argument("--verbose", action="store_true", help=VERBOSE_HELP)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    _add_verbose(sub)
    return parser


VERBOSE_HELP = "on an error, also print the errors behind it (an object store's whole answer)"


def _add_verbose(sub: argparse._SubParsersAction) -> None:
    """Give every command's parser --verbose too, so it may follow the command's own arguments
    (SUPPRESS: a command's default does not undo ``lsm --verbose COMMAND``). Done here, walking the
    tree argparse built, so no command module has to remember it."""
    for p in set(sub.choices.values()):
        if "--verbose" not in p._option_string_actions:
            p.add_argument("--verbose", action="store_true", default=argparse.SUPPRESS, help=VERBOSE_HELP)
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                _add_verbose(action)


def check_locations(args: argparse.Namespace) -> None:
    """Refuse a malformed URL (or a local path that reads like one) among the arguments naming a
    database, file or directory: `ObjectStoreConfigError`, before the command opens or creates anything."""
    from storage.objstore_config import check_location

    names = LOCATION_ARGS + (("log",) if getattr(args, "source", None) in SOURCE_KINDS else ())
    for name in names:
        value = getattr(args, name, None)
        for v in value if isinstance(value, list) else [value]:
            if isinstance(v, str) and v != "-":
                check_location(v, "database" if name == "path" else "file or directory")


def chain(e: BaseException) -> list[str]:
    """``caused by:`` lines for the errors behind `e` (``__cause__``, else ``__context__``), each with its
    whole text, continuation lines indented; what `--verbose` prints. An `ObjectStoreError` stands for
    the obstore error behind it by its `detail` (the same text, credentials replaced by ``***``), and
    the AWS credentials of the environment are hidden from every line."""
    from storage.objstore_config import redact
    from storage.objstore_errors import ObjectStoreError

    secrets = [v for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN") if (v := os.environ.get(k))]

    def behind(x: BaseException) -> BaseException | None:
        return x.__cause__ or (None if x.__suppress_context__ else x.__context__)

    lines: list[str] = []
    seen: set[int] = set()
    cur: BaseException | None = e
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        nxt = behind(cur)
        if cur is not e:
            lines.append(f"{type(cur).__name__}: {cur}")
        if isinstance(cur, ObjectStoreError) and cur.detail:
            lines.append(cur.detail)
            nxt = behind(nxt) if nxt is not None else None  # `detail` was that error's text: not twice
        cur = nxt
    return ["caused by: " + redact(text, secrets).rstrip().replace("\n", "\n    ") for text in lines]


def describe(e: BaseException) -> str:
    """The one-line message for an error the tools expect."""
    if isinstance(e, OSError) and e.strerror:
        return f"{e.filename}: {e.strerror}" if e.filename is not None else e.strerror
    text = str(e) or type(e).__name__
    return " ".join(text.split())  # one line, whatever the message holds


def run(argv: Sequence[str]) -> int:
    """Parse `argv` (without the program name), run the command, return the exit status."""
    try:
        parser = build_parser()
        args = parser.parse_args(list(argv))
    except UsageError as e:
        sub = e.prog.removeprefix("lsm").strip()
        where = f"{sub}: " if sub else ""
        hint = f"lsm {sub} --help" if sub else "lsm --help"
        render.error(f"{where}{e} (see '{hint}')")
        return EXIT_BAD_INPUT
    except SystemExit as e:  # --help, --version
        return e.code if isinstance(e.code, int) else 0
    try:
        check_locations(args)
        render.finish_output_args(args)  # the bytes encodings, decided once for the whole output
        status = args.func(args)
        sys.stdout.flush()
        return status
    except BrokenPipeError:
        # The reader (e.g. `| head`) went away: stop quietly, and keep the interpreter's final flush quiet.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK
    except KeyboardInterrupt:
        return 130
    except (LsmError, OSError, ValueError) as e:
        render.error(describe(e))
        if getattr(args, "verbose", False):
            for line in chain(e):
                sys.stderr.write(line + "\n")
        return EXIT_BAD_INPUT
    except Exception as e:  # noqa: BLE001 - a bug still gets one line, and the traceback on request
        if os.environ.get("LSM_TRACEBACK"):
            import traceback

            traceback.print_exc()
        render.error(f"internal error: {type(e).__name__}: {describe(e)} (set LSM_TRACEBACK=1 for details)")
        return EXIT_INTERNAL


__all__ = ["COMMAND_MODULES", "LOCATION_ARGS", "build_parser", "chain", "check_locations", "describe", "run",
           "Parser", "UsageError"]
