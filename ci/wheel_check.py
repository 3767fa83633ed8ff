"""Build the wheel, install it into a fresh virtualenv, and use it the way a new user would.

`make test` runs this (target `wheel-check`) because the editable install of `make test`/`make demo`
puts the source tree on sys.path and so hides a module the wheel leaves out (as `lsm.sources` once was).
Here nothing of the source tree is importable: the wheel is built from a copy of the tree (so the tree
gets no build/ directory whose stale files could leak into later wheels), the virtualenv is new and has
no system site-packages (so the wheel's own dependency list must install; pip's cache makes it quick),
and every command runs in an empty directory with PYTHONPATH unset.

Checks, in order: every module of the four packages imports (a module that needs an optional extra may
fail only on that extra, or on pytest for the pytest plugin lsm.testing), `lsm --help` (and the docs file
it names, which the wheel installs into the virtualenv), and an end-to-end
flow through the installed console script: `lsm log write`, `lsm ingest`, `lsm scan`, `lsm check`, and
`lsm simulate` of examples/demo.toml; then one object-store flow: a database at an ``s3://`` URL on
moto's S3 server, written by one process of the virtualenv (puts, a flush to an SST object, a synced
write left in the WAL) and read back by another. The server runs in this process (moto is a dev
dependency, not one of the wheel's); the virtualenv's processes reach it through the standard AWS
variables, as a user's would reach S3.

Usage: python ci/wheel_check.py [--keep]   (--keep leaves the temporary directory and prints its path)
Exit status 0 when every check passes, 1 with the failing step on stderr otherwise.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("formats", "lsm", "compaction", "tools")
# The extras of pyproject.toml, and pytest for lsm.testing (the pytest plugin the wheel registers, loaded
# only by pytest): a module may need one of them, the base wheel does not install them.
OPTIONAL = ("pyspark", "matplotlib", "tqdm", "rocksdict", "plyvel", "pytest", "hypothesis")

# Run inside the fresh virtualenv: import every module of the installed packages.
IMPORT_ALL = f"""
import importlib, pkgutil, sys
optional = {OPTIONAL!r}
roots = {PACKAGES!r}
venv = sys.prefix
count = 0
for root in roots:
    pkg = importlib.import_module(root)
    assert pkg.__file__.startswith(venv), f"{{root}} imported from {{pkg.__file__}}, not the virtualenv"
    for info in pkgutil.walk_packages(pkg.__path__, root + "."):
        if info.name.endswith(".__main__"):  # runs its program when imported
            continue
        try:
            importlib.import_module(info.name)
        except ModuleNotFoundError as e:
            if (e.name or "").split(".")[0] not in optional:
                raise SystemExit(f"{{info.name}}: {{e}}")
        count += 1
import lsm
print(f"imported {{count}} modules; lsm from {{lsm.__file__}}")
"""

EVENTS = (
    '{"partition": 0, "key": "user:1", "value": "alice"}\n'
    '{"partition": 0, "key": "user:2", "value": "bob", "ttl": 60000}\n'
    '{"partition": 1, "key": "user:3", "value": "carol"}\n'
    '{"partition": 1, "key": "user:2", "value": null}\n'
)

# Run inside the fresh virtualenv, with the AWS variables pointing at the test server: write a database
# at the URL argv[1] (an SST object and a WAL object), then, in a second process, read it back.
S3_WRITE = """
import sys, lsm
with lsm.DB.open(sys.argv[1]) as db:
    for i in range(200):
        db.put(b"user:%03d" % i, b"v%d" % i)
    db.flush()
    db.put(b"user:late", b"in the WAL", options=lsm.WriteOptions(sync=True))
    print(f"wrote 201 rows, {db.object_store_stats()['put']} PUTs")
"""
S3_READ = """
import sys, lsm
with lsm.DB.open(sys.argv[1]) as db:
    rows = dict(db.scan())
    assert len(rows) == 201 and rows[b"user:042"] == b"v42" and rows[b"user:late"] == b"in the WAL", rows
    print(f"read back {len(rows)} rows, {db.object_store_stats()['get']} GETs")
"""


class CheckFailed(Exception):
    pass


def source_files(root: Path) -> list[str]:
    """The files a fresh clone has, plus new files not yet committed (git's view, ignoring .gitignore'd)."""
    p = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=root,
        capture_output=True,
        text=True,
    )
    if p.returncode != 0:
        raise CheckFailed(f"git ls-files failed in {root}: {p.stderr.strip()}")
    return [f for f in p.stdout.split("\0") if f and (root / f).is_file()]


def run(step: str, cmd: list[str], *, cwd: Path, env: dict, stdin: str | None = None) -> str:
    t = time.monotonic()
    p = subprocess.run(cmd, cwd=cwd, env=env, input=stdin, capture_output=True, text=True)
    print(f"  {step}: exit {p.returncode} in {time.monotonic() - t:.1f}s", flush=True)
    if p.returncode != 0:
        shown = " ".join(c if "\n" not in c else "..." for c in cmd)
        raise CheckFailed(f"{step} failed (exit {p.returncode}): {shown}\n{p.stdout}{p.stderr}")
    return p.stdout


def check(tmp: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    src, dist, venv, work = tmp / "src", tmp / "dist", tmp / "venv", tmp / "work"
    for f in source_files(ROOT):
        (src / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / f, src / f)
    work.mkdir()
    py = [sys.executable]
    run(
        "build the wheel",
        [*py, "-m", "pip", "wheel", "-q", "--no-deps", str(src), "-w", str(dist)],
        cwd=work,
        env=env,
    )
    wheels = sorted(dist.glob("*.whl"))
    if len(wheels) != 1:
        raise CheckFailed(f"expected one wheel in {dist}, found {wheels}")
    # --without-pip, and this interpreter's pip installs into it (pip --python): ensurepip is the slow part
    run("create a fresh virtualenv", [*py, "-m", "venv", "--without-pip", str(venv)], cwd=work, env=env)
    vpy, lsm = str(venv / "bin" / "python"), str(venv / "bin" / "lsm")
    run(
        "install the wheel and its dependencies",
        [*py, "-m", "pip", "--python", vpy, "install", "-q", "--disable-pip-version-check", str(wheels[0])],
        cwd=work,
        env=env,
    )
    print("   ", run("import every module", [vpy, "-c", IMPORT_ALL], cwd=work, env=env).strip())
    help_text = run("lsm --help", [lsm, "--help"], cwd=work, env=env)
    if "usage: lsm" not in help_text:
        raise CheckFailed("lsm --help printed no usage line")
    # the docs it names are the wheel's own copy (data-files), inside the virtualenv
    docs = next((line.removeprefix("Docs: ").strip() for line in help_text.splitlines() if line.startswith("Docs: ")), "")
    if not docs.startswith(str(venv)) or not os.path.isfile(docs):
        raise CheckFailed(f"lsm --help names docs the wheel did not install: {docs!r}")
    run("lsm log write", [lsm, "log", "write", "events"], cwd=work, env=env, stdin=EVENTS)
    run("lsm ingest", [lsm, "ingest", "db", "events", "--name", "events"], cwd=work, env=env)
    out = run("lsm scan", [lsm, "scan", "--json", "db"], cwd=work, env=env)
    for want in ('"user:1"', '"alice"', '"user:3"', '"carol"'):
        if want not in out:
            raise CheckFailed(f"lsm scan output lacks {want}:\n{out}")
    run("lsm check", [lsm, "check", "db"], cwd=work, env=env)
    # `lsm simulate` of the example spec the docs run (the spec is a file of the checkout, not of the
    # wheel; without the `sim` extra there are no plots, the rest must work)
    spec = str(src / "examples" / "demo.toml")
    run("lsm simulate", [lsm, "simulate", spec, "--out", "sim", "--no-progress"], cwd=work, env=env)
    if not (work / "sim" / "summary.json").is_file():
        raise CheckFailed("lsm simulate wrote no sim/summary.json")
    check_s3(vpy, work, env)


def check_s3(vpy: str, work: Path, env: dict) -> None:
    """One database on an S3 server (moto's, started here) through the wheel: write, reopen, read."""
    sys.path.insert(0, str(ROOT))  # the tests' S3 server helper (this interpreter has moto; the venv not)
    from tests.s3server import BUCKET, S3Server

    t = time.monotonic()
    server = S3Server()
    print(f"  start an S3 server (moto): {server.endpoint} in {time.monotonic() - t:.1f}s", flush=True)
    try:
        url = server.new_url()
        s3env = {**env, **server.env}
        print("   ", run("write a database at an s3:// URL", [vpy, "-c", S3_WRITE, url], cwd=work, env=s3env).strip())
        print("   ", run("read it back in a new process", [vpy, "-c", S3_READ, url], cwd=work, env=s3env).strip())
        prefix = url.split(f"{BUCKET}/", 1)[1]
        listing = urllib.request.urlopen(f"{server.endpoint}/{BUCKET}?list-type=2&prefix={prefix}/").read()
        for part in (b"/manifest/", b"/sst/", b"/wal/"):
            if part not in listing:
                raise CheckFailed(f"the S3 server holds nothing under {url}{part.decode()}:\n{listing[:2000]!r}")
        if (work / "s3:").exists():
            raise CheckFailed(f"the s3:// database was written to a local directory {work / 's3:'}")
    finally:
        server.stop()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory and print its path")
    args = ap.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="lsm-wheel-check-"))
    t = time.monotonic()
    print(f"wheel check: building from {ROOT}", flush=True)
    try:
        check(tmp)
    except CheckFailed as e:
        print(f"wheel check FAILED: {e}", file=sys.stderr)
        return 1
    finally:
        if args.keep:
            print(f"wheel check: kept {tmp}", flush=True)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    print(f"wheel check: OK in {time.monotonic() - t:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
