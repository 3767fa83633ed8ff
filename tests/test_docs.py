"""The docs run: every ```python block and every `$ lsm ...` line of a ```console block in README.md and
docs/*.md.

Each file gets one fresh temporary directory as its working directory, and its blocks run there in the
order they appear, so a later block sees what an earlier one wrote (files, and the names a python block
defined: the python blocks of one file share one namespace). The directory holds one thing beforehand:
a link `examples` to the repository's examples/, because the docs name the example specs by their path
in a checkout. `lsm` is the console script of the interpreter running the tests (as in the CLI tests,
tests/tools/_cli.py), run by bash with PYTHONPATH set to the repository root, so a command may use
quotes, pipes, redirections and `\\` continuations.

A `$ lsm` command must exit 0, unless the doc shows otherwise: an output line starting `lsm: error:`
right after it means it must fail with that error (exit 2, the line on stderr equal to the shown one,
where `...` in the shown line stands for any text), and a comment `# exit N` on the command line means
it must exit N (`lsm check` finding a problem: `# exit 1`, and its `lsm: error:` line still compared). Other output is NOT compared with what the doc shows (times, sizes and paths differ
from run to run); a command must never print a traceback.

A ```toml block is a simulation spec (docs/simulate.md) and runs through `tools.simulate.run` (no
plots): a whole spec (one with ``[workload]``) as it is, a block without one as a change to the doc's
last whole spec (a ``[sweep]`` table added to it, say). To keep the docs test short a spec is run with
fewer operations in the same simulated time: every ``ops_per_sec`` (a phase's, and a ``[sweep]`` list of
them) is scaled by one factor, so that its largest simulation makes about `SPEC_MAX_OPS` operations.
Times, TTLs, samples, compaction ticks and policies stay as written: every field is checked and every
code path of the spec runs.

A block that cannot run here (it needs a cluster, a broker, runs until Ctrl-C, takes minutes) is
preceded, on the line right before its opening fence, by `<!-- docs-test: skip (the reason) -->`; the
reason is required. A `$ lsm` line outside a ```console block is an error too: it would go untested.
"""

from __future__ import annotations

import contextlib
import copy
import os
import re
import shlex
import subprocess
import sys
import tomllib
import types
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import lsm
from compaction import policy
from tests.tools._cli import LSM_CMD, ROOT, lsm_env
from tools import simulate
from tools.simulate.spec import parse_duration

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^(\s*)```\s*([\w+-]*)\s*$")
MARKER = re.compile(r"^\s*<!--\s*docs-test:\s*skip\s*\((?P<reason>.*)\)\s*-->\s*$")
EXIT_COMMENT = re.compile(r"#[^'\"]*\bexit (\d+)\b[^'\"]*$")
COMMAND_TIMEOUT_S = 120
SPEC_MAX_OPS = 3000  # operations per simulation of a ```toml spec block (scaled down to about it, see above)


@dataclass
class Block:
    path: Path
    line: int  # 1-based line of the opening fence
    lang: str
    lines: list[str]
    skip: str | None = None  # the reason given by a skip marker


@dataclass
class Command:
    line: int
    text: str  # without the "$ " prompt; continuation lines kept, bash joins them
    output: list[str] = field(default_factory=list)

    @property
    def expected_error(self) -> str | None:
        errors = [o for o in self.output if o.startswith("lsm: error:")]
        return errors[0] if errors else None

    @property
    def expected_exit(self) -> int:
        m = EXIT_COMMENT.search(self.text.splitlines()[-1])
        if m:
            return int(m.group(1))
        return 2 if self.expected_error else 0


class DocError(Exception):
    pass


def parse_blocks(path: Path, text: str | None = None) -> list[Block]:
    """The fenced blocks of a markdown file, with their skip markers; DocError on a malformed marker."""
    lines = (path.read_text() if text is None else text).splitlines()
    blocks, i = [], 0
    where = path.name
    while i < len(lines):
        line = lines[i]
        if re.match(r"\s*<!--.*docs-test", line):  # a marker is a line of its own; prose may name it
            m = MARKER.match(line)
            if not m or not m.group("reason").strip():
                raise DocError(
                    f"{where}:{i + 1}: a skip marker needs a reason: <!-- docs-test: skip (why) -->"
                )
            if i + 1 >= len(lines) or not FENCE.match(lines[i + 1]):
                raise DocError(f"{where}:{i + 1}: a skip marker must be the line right before a ``` fence")
        m = FENCE.match(line)
        if not m:
            i += 1
            continue
        indent, lang = len(m.group(1)), m.group(2)
        start, body = i, []
        i += 1
        while i < len(lines) and lines[i].strip() != "```":
            # a fence indented in a list item: its lines carry that indentation too
            body.append(lines[i][indent:] if not lines[i][:indent].strip() else lines[i].lstrip())
            i += 1
        if i >= len(lines):
            raise DocError(f"{where}:{start + 1}: the ``` fence is never closed")
        prev = MARKER.match(lines[start - 1]) if start else None
        blocks.append(Block(path, start + 1, lang, body, prev.group("reason").strip() if prev else None))
        i += 1
    return blocks


def console_commands(block: Block) -> list[Command]:
    """The `$ lsm` commands of a console block, each with the output lines the doc shows after it."""
    commands: list[Command] = []
    current: Command | None = None
    lines = iter(enumerate(block.lines))
    for n, line in lines:
        if line.startswith("$ "):
            text = line[2:]
            while text.endswith("\\"):
                n2, more = next(lines, (n, ""))
                text += "\n" + more
            current = Command(block.line + 1 + n, text) if text.startswith("lsm ") else None
            if current:
                commands.append(current)
        elif current is not None:
            current.output.append(line)
    return commands


def _error_matches(shown: str, got: str) -> bool:
    pattern = ".*".join(re.escape(part) for part in " ".join(shown.split()).split("..."))
    return re.fullmatch(pattern, " ".join(got.split())) is not None


@pytest.fixture(scope="module")
def lsm_bin(tmp_path_factory) -> Path:
    """A directory holding `lsm`: a shim running the tests' own console script (or python -m tools.cli)."""
    d = tmp_path_factory.mktemp("bin")
    shim = d / "lsm"
    shim.write_text(f'#!/bin/sh\nexec {shlex.join(LSM_CMD)} "$@"\n')
    shim.chmod(0o755)
    return d


def run_command(cmd: Command, where: str, cwd: Path, bin_dir: Path) -> None:
    env = lsm_env()
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    p = subprocess.run(
        ["bash", "-c", cmd.text], cwd=cwd, env=env, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S
    )
    shown = f"{where}:{cmd.line}: $ {cmd.text}\n--- stdout\n{p.stdout[-3000:]}--- stderr\n{p.stderr[-3000:]}"
    assert "Traceback" not in p.stderr, f"a traceback:\n{shown}"
    assert p.returncode == cmd.expected_exit, (
        f"exit {p.returncode}, the doc expects {cmd.expected_exit}\n{shown}"
    )
    if cmd.expected_error:
        got = [line for line in p.stderr.splitlines() if line.startswith("lsm: error:")]
        assert got and _error_matches(cmd.expected_error, got[0]), (
            f"the doc shows {cmd.expected_error!r}, the command printed {got}\n{shown}"
        )


def run_python(block: Block, where: str, namespace: dict) -> None:
    # Blank lines keep the doc's line numbers in tracebacks.
    source = "\n" * block.line + "\n".join(block.lines) + "\n"
    exec(compile(source, where, "exec"), namespace)


def _phase_ops(phase: dict, rate: float) -> float:
    return parse_duration(phase["duration"], "duration") / 1000 * rate


def shrink_spec(spec: dict, max_ops: int) -> dict:
    """`spec` with every ``ops_per_sec`` (each phase's, and each value of a ``[sweep]`` entry that sets
    one) scaled by the one factor that brings its largest simulation to at most `max_ops` operations;
    the spec itself when it is that small already."""
    spec = copy.deepcopy(spec)
    phases = spec["workload"]["phases"]
    rates = [[p.get("ops_per_sec", 0)] for p in phases]
    swept = {}
    for path, values in spec.get("sweep", {}).items():
        m = re.fullmatch(r"workload\.phases\[(\d+)\]\.ops_per_sec", path)
        if m:
            swept[path] = int(m.group(1))
            rates[int(m.group(1))] = values
    ops = sum(_phase_ops(p, max(r)) for p, r in zip(phases, rates, strict=True))
    if ops <= max_ops:
        return spec
    f = max_ops / ops
    for p in phases:
        p["ops_per_sec"] = p.get("ops_per_sec", 0) * f
    for path in swept:
        spec["sweep"][path] = [v * f for v in spec["sweep"][path]]
    return spec


def run_spec(block: Block, where: str, last: dict | None, out: Path) -> dict:
    """Run a ```toml block as a spec (see the module docstring); return the whole spec it was."""
    try:
        text = tomllib.loads("\n".join(block.lines))
    except tomllib.TOMLDecodeError as e:
        raise AssertionError(f"{where}:{block.line}: not TOML: {e}") from None
    if "workload" not in text:
        assert last is not None, f"{where}:{block.line}: a spec fragment with no whole spec before it"
        text = {**copy.deepcopy(last), **text}
    summary = simulate.run(shrink_spec(text, SPEC_MAX_OPS), out, plots=False)
    policies = summary["policies"]
    cells = 1
    for values in text.get("sweep", {}).values():
        cells *= len(values)
    assert len(policies) == cells * len(text["policy"]), f"{where}:{block.line}: {len(policies)} simulations"
    assert all(p["ops"] > 0 and p["samples"] > 0 for p in policies), f"{where}:{block.line}: {policies}"
    return text


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_doc_runs(doc: Path, tmp_path, monkeypatch, lsm_bin):
    where = str(doc.relative_to(ROOT))
    blocks = parse_blocks(doc)
    for b in blocks:
        if b.lang != "console":
            stray = [n for n, line in enumerate(b.lines) if line.startswith("$ lsm ")]
            assert not stray, f"{where}:{b.line + 1 + stray[0]}: a `$ lsm` line outside a ```console block"
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    # The blocks run as the body of one module, registered like an imported one (dataclasses look
    # their class's module up in sys.modules).
    module = types.ModuleType("docs_test_" + re.sub(r"\W", "_", doc.stem))
    monkeypatch.setitem(sys.modules, module.__name__, module)
    namespace = module.__dict__
    # An example may register a compaction policy (docs/compaction.md): it must not outlive this test.
    policies = dict(policy.POLICIES)
    spec = None  # the doc's last whole ```toml spec
    try:
        for b in blocks:
            if b.skip is not None:
                continue
            if b.lang == "python":
                run_python(b, where, namespace)
            elif b.lang == "toml":
                spec = run_spec(b, where, spec, tmp_path / f"spec-{b.line}")
            elif b.lang == "console":
                for cmd in console_commands(b):
                    run_command(cmd, where, tmp_path, lsm_bin)
    finally:
        policy.POLICIES.clear()
        policy.POLICIES.update(policies)
        # A store a block left open would keep its background workers running past this test.
        for value in namespace.values():
            if isinstance(value, lsm.DB):
                with contextlib.suppress(Exception):
                    value.close()


# -- the test's own rules ------------------------------------------------------------------------------
def test_a_skip_marker_needs_a_reason(tmp_path):
    doc = tmp_path / "x.md"
    with pytest.raises(DocError, match="needs a reason"):
        parse_blocks(doc, "<!-- docs-test: skip -->\n```python\n1/0\n```\n")
    with pytest.raises(DocError, match="needs a reason"):
        parse_blocks(doc, "<!-- docs-test: skip ( ) -->\n```python\n1/0\n```\n")
    with pytest.raises(DocError, match="right before"):
        parse_blocks(doc, "<!-- docs-test: skip (broker) -->\n\n```python\n1/0\n```\n")
    assert parse_blocks(doc, "mark it `<!-- docs-test: skip (why) -->` in prose\n") == []
    (b,) = parse_blocks(doc, "<!-- docs-test: skip (a Kafka broker) -->\n```python\n1/0\n```\n")
    assert b.skip == "a Kafka broker" and b.lines == ["1/0"] and b.line == 2


def test_console_commands_outputs_continuations_and_expectations(tmp_path):
    text = (
        "```console\n"
        "$ lsm a \\\n    --b c\nout 1\n"
        "$ lsm d   # exit 1 after deleting an SST\n"
        "$ lsm e\nlsm: error: no ... here\n"
        "$ echo x\nnot lsm\n"
        "```\n"
    )
    (b,) = parse_blocks(tmp_path / "x.md", text)
    a, d, e = console_commands(b)
    assert (a.text, a.output, a.expected_exit, a.line) == ("lsm a \\\n    --b c", ["out 1"], 0, 2)
    assert (d.text.split()[:2], d.expected_exit) == (["lsm", "d"], 1)
    assert (e.expected_exit, e.expected_error, e.output) == (
        2,
        "lsm: error: no ... here",
        ["lsm: error: no ... here"],
    )
    assert _error_matches(e.expected_error, "lsm: error: no  database   here")
    assert not _error_matches(e.expected_error, "lsm: error: a database here")


def test_a_command_is_held_to_its_exit_status_and_error_line(tmp_path, lsm_bin):
    (b,) = parse_blocks(
        tmp_path / "x.md",
        "```console\n$ lsm get nodb k\n$ lsm get nodb k\nlsm: error: ...nodb...\n"
        "$ lsm get nodb k\nlsm: error: something else\n$ lsm --help   # exit 1\n```\n",
    )
    silent, shown, wrong_line, wrong_status = console_commands(b)
    with pytest.raises(AssertionError, match="exit 2, the doc expects 0"):
        run_command(silent, "x.md", tmp_path, lsm_bin)
    run_command(shown, "x.md", tmp_path, lsm_bin)
    with pytest.raises(AssertionError, match="the doc shows"):
        run_command(wrong_line, "x.md", tmp_path, lsm_bin)
    with pytest.raises(AssertionError, match="exit 0, the doc expects 1"):
        run_command(wrong_status, "x.md", tmp_path, lsm_bin)


def test_a_spec_block_is_shrunk_by_its_rates_alone():
    spec = {
        "workload": {"phases": [{"duration": "10d", "ops_per_sec": 1}, {"duration": "2d", "ops_per_sec": 0}]},
        "sweep": {"workload.phases[0].ops_per_sec": [0.5, 2], "policy.l0_compaction_threshold": [4, 8]},
    }
    small = shrink_spec(spec, 17_280)  # the largest cell: 10 days at 2/s = 1,728,000 operations
    assert small["workload"]["phases"] == [{"duration": "10d", "ops_per_sec": 0.01}, {"duration": "2d", "ops_per_sec": 0}]
    assert small["sweep"] == {"workload.phases[0].ops_per_sec": [0.005, 0.02], "policy.l0_compaction_threshold": [4, 8]}
    assert spec["workload"]["phases"][0]["ops_per_sec"] == 1  # a copy
    assert shrink_spec(small, 17_280) == small
