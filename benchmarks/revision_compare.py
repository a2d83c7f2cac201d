"""Did a change alter any command's output, or make one slower? Every corpus command at two revisions, side
by side, on the same input.

    .venv/bin/python benchmarks/revision_compare.py --base REV [--head REV|WORKTREE] --input DIR --out DIR
        [--repeat N] [--quick] [--only TEXT] [--allow-diff] [--keep]

Each revision gets a throwaway ``git worktree`` under ``--out/trees`` (``--head`` may also name a folder that
is used as it is: a checkout with uncommitted changes; the default is this checkout) and its own venv under
``--out/venvs``: a ``cp -al`` of this repository's ``.venv`` with ``pip install -e`` of the tree (seconds; a
check that ``zephyr`` then imports from that tree guards against timing the wrong code). Then every command of
``_compare_commands.COMMANDS`` runs with the same arguments at both revisions (renamed flags: the first name
each revision's parser accepts), with ``--executor local --workers N --small-job-bytes 0`` (the sample is
below the 4 MiB small-job default, which would run every job in the driver and skip the worker processes), in
one folder for both revisions (``--out/run/COMMAND``, moved to ``--out/kept/SIDE/COMMAND`` after each run, so
absolute paths inside outputs are equal), interleaved (base, head, then head, base, ...) ``--repeat`` times.

Per command: the best wall seconds of the repeats (the whole process, imports included), the peak summed RSS
of its process tree (psutil, every 0.1 s; the largest of the repeats), and a sha256 of every file it wrote and
of its stdout (``_compare_digest``; files that hold times are compared by presence only, see ``IGNORED`` there,
and ``_SUCCESS.json`` markers without their finish time). A command whose outputs differ between its own repeats is marked nondeterministic.
Commands that read another command's output (``quality score`` reads a model) read the base revision's, so
each row compares one command on identical inputs. Registered commands that are neither run nor excluded (with
a reason, ``EXCLUDED``) are listed as not covered and fail the run.

Writes a Markdown table to stdout and ``--out/compare.md`` and everything (argument lists, every run, every
digest) to ``--out/compare.json``. Exits 1 if any output differs or a command fails, unless ``--allow-diff``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _compare_commands import (  # noqa: E402
    COMMANDS,
    EXCLUDED,
    PIPELINE,
    REPLACE_KEYS,
    SHARD_KEYS,
    Command,
    data_files,
    make_inputs,
    resolve,
)
from _compare_digest import IGNORED, STDOUT, STRIPPED, differing, digest_bytes, digest_tree  # noqa: E402
from _compare_report import markdown  # noqa: E402
from _measure import machine, run_measured  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent

PROBE = """
import argparse, json, zephyr
from zephyr.cli import build_parser

def leaves(parser, prefix=()):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                nested = dict(leaves(sub, (*prefix, name)))
                if nested:
                    yield from nested.items()
                else:
                    yield " ".join((*prefix, name)), {
                        flag: [str(c) for c in a.choices] if a.choices else None
                        for a in sub._actions for flag in a.option_strings
                    }

print(json.dumps({"zephyr": zephyr.__file__, "commands": dict(leaves(build_parser()))}))
"""
"""Run by each revision's interpreter: where zephyr imports from, and every leaf command's flags."""


@dataclass
class Side:
    name: str
    label: str
    tree: Path
    venv: Path
    commit: str
    commands: dict = field(default_factory=dict)
    worktree: bool = False
    """A worktree this script made (removed at the end unless --keep)."""

    @property
    def zephyr(self) -> str:
        return str(self.venv / "bin" / "zephyr")


def _git(*args: str, cwd: Path = ROOT) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def _venv_for(tree: Path, venv: Path) -> Path:
    """A venv whose editable zephyr is ``tree``: the tree's own ``.venv`` if it already is one, else a hard-link
    copy of this repository's ``.venv`` with ``pip install -e tree``."""
    own = tree / ".venv"
    if own.is_dir() and _probe(own, tree, check_only=True):
        return own
    if venv.exists():
        shutil.rmtree(venv)
    venv.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["cp", "-al", str(ROOT / ".venv"), str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "-e", str(tree), "--no-deps"]
    subprocess.run([*pip, "--no-build-isolation"], check=True, capture_output=True, cwd=tree)
    return venv


def _probe(venv: Path, tree: Path, *, check_only: bool = False) -> dict | None:
    """The revision's registry (``PROBE``); None (or an error) if zephyr does not import from ``tree``."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    run = subprocess.run(
        [str(venv / "bin" / "python"), "-c", PROBE], capture_output=True, text=True, env=env, cwd=venv.parent
    )
    found = json.loads(run.stdout) if run.returncode == 0 else None
    if found and Path(found["zephyr"]).resolve().is_relative_to(tree.resolve()):
        return found
    if check_only:
        return None
    raise SystemExit(f"zephyr in {venv} does not import from {tree}: {found or run.stderr[-2000:]}")


def make_side(name: str, spec: str, out: Path) -> Side:
    """A revision (commit, branch, tag) as a fresh worktree, or a folder used as it is."""
    folder = Path(spec)
    if folder.is_dir():
        tree = folder.resolve()
        dirty = (
            " + uncommitted changes"
            if _git("status", "--porcelain", "--untracked-files=no", cwd=tree)
            else ""
        )
        commit = _git("rev-parse", "--short", "HEAD", cwd=tree)
        side = Side(name, f"{tree} ({commit}{dirty})", tree, tree / ".venv", commit)
    else:
        commit = _git("rev-parse", "--short", f"{spec}^{{commit}}")
        tree = out / "trees" / name
        if tree.exists():
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, capture_output=True)
            shutil.rmtree(tree, ignore_errors=True)
        tree.parent.mkdir(parents=True, exist_ok=True)
        _git("worktree", "add", "-q", "--detach", str(tree), commit)
        side = Side(name, f"{spec} ({commit})", tree, tree / ".venv", commit, worktree=True)
    side.venv = _venv_for(side.tree, out / "venvs" / name)
    side.commands = _probe(side.venv, side.tree)["commands"]
    return side


def pipeline_config(side: Side, files: list[str], dest: Path) -> str:
    """The pipeline config for ``side``: ``PIPELINE`` with the first shard key and column-replacing key its
    ``zephyr run --check`` takes."""
    for key in SHARD_KEYS:
        for replace in REPLACE_KEYS:
            path = dest / f"pipeline-{side.name}.yaml"
            path.write_text(PIPELINE.format(paths=json.dumps(files), shard_key=key, replace_key=replace))
            check = subprocess.run([side.zephyr, "run", str(path), "--check"], capture_output=True, cwd=dest)
            if check.returncode == 0:
                return str(path)
    raise SystemExit(f"{side.label}: no keys of {SHARD_KEYS} x {REPLACE_KEYS} pass `zephyr run --check`")


def run_once(side: Side, argv: list[str], run_dir: Path, log_dir: Path, env: dict) -> dict:
    """One run in a fresh ``run_dir``: wall seconds, peak RSS, exit code and the digest of what it wrote.

    Both revisions run in the same folder (one after the other), so an absolute output path written into a
    file or hashed into a fingerprint is the same on both sides."""
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    slug = run_dir.name
    stdout, stderr = log_dir / f"{slug}.stdout", log_dir / f"{slug}.stderr"
    measured = run_measured(
        [side.zephyr, *argv], log_path=str(stderr), stdout_path=str(stdout), cwd=str(run_dir), env=env
    )
    digests = digest_tree(run_dir)
    digests[STDOUT] = digest_bytes(stdout.read_bytes())
    return {
        "rc": measured["rc"],
        "wall_s": measured["wall_s"],
        "peak_mb": measured["peak_rss_mb"],
        "digests": digests,
    }


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in name).strip("-")


def compare_command(
    command: Command, sides: list[Side], values: dict, out: Path, repeat: int, env: dict
) -> dict:
    """``command`` ``repeat`` times at each side, interleaved; its row of the comparison."""
    row: dict = {"command": command.name, "words": command.words}
    argvs = {}
    for side in sides:
        if command.words not in side.commands:
            row[side.name] = {"absent": True}
            continue
        argvs[side.name] = [
            *command.words.split(),
            *resolve(command, side.commands[command.words], values[side.name]),
            *values["globals"],
        ]
        row[side.name] = {"argv": argvs[side.name], "runs": []}
    for r in range(repeat):
        for side in sides if r % 2 == 0 else sides[::-1]:
            if side.name not in argvs:
                continue
            log_dir = out / "logs" / side.name
            log_dir.mkdir(parents=True, exist_ok=True)
            result = run_once(
                side, argvs[side.name], out / "run" / _slug(command.name), log_dir, env[side.name]
            )
            kept = out / "kept" / side.name / _slug(command.name)  # the last run's files, to look into
            shutil.rmtree(kept, ignore_errors=True)
            kept.parent.mkdir(parents=True, exist_ok=True)
            (out / "run" / _slug(command.name)).rename(kept)
            row[side.name]["runs"].append(result)
            print(
                f"  {command.name} [{side.name} {r + 1}/{repeat}]: {result['wall_s']:.1f} s, rc {result['rc']}",
                file=sys.stderr,
                flush=True,
            )
    return _summarize(row, [s.name for s in sides])


def _summarize(row: dict, names: list[str]) -> dict:
    """Best wall, largest peak, the last run's digest, nondeterminism and failures per side; the differing
    files between the sides."""
    for name in names:
        side = row[name]
        if side.get("absent"):
            continue
        runs = side["runs"]
        side["best_s"] = min(r["wall_s"] for r in runs)
        side["peak_mb"] = max(r["peak_mb"] for r in runs)
        side["rc"] = max((r["rc"] for r in runs), key=abs)
        side["digests"] = runs[-1]["digests"]
        side["nondeterministic"] = sorted(
            {f for r in runs[:-1] for f in differing(r["digests"], side["digests"])}
        )
    base, head = (row[n] for n in names)
    if base.get("absent") or head.get("absent"):
        # a command new at head compares with nothing (n/a); one gone from head is a difference
        row["identical"] = False if head.get("absent") else None
        row["differing"] = [f"(command absent at {'head' if head.get('absent') else 'base'})"]
        return row
    row["differing"] = differing(base["digests"], head["digests"])
    failed = [f"{n} exit {row[n]['rc']}" for n in names if row[n]["rc"] != 0]
    row["identical"] = not row["differing"] and not failed
    row["differing"] = failed + row["differing"]
    return row


def _argparser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", required=True, help="revision before the change (commit, branch, tag)")
    parser.add_argument(
        "--head", default=str(ROOT), help="revision or folder after it (default: this checkout)"
    )
    parser.add_argument(
        "--input", default=str(ROOT / "data" / "sample"), help="folder of Parquet/JSONL files"
    )
    parser.add_argument("--out", required=True, help="scratch folder: trees, venvs, runs, compare.md/.json")
    parser.add_argument(
        "--repeat", type=int, default=3, help="runs per command and side; the best wall counts"
    )
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="only the handful of commands marked quick")
    parser.add_argument(
        "--only",
        default=None,
        help="only the commands whose name contains one of these comma-separated texts",
    )
    parser.add_argument("--allow-diff", action="store_true", help="exit 0 even if outputs differ")
    parser.add_argument("--keep", action="store_true", help="keep the worktrees and venvs made under --out")
    return parser


def _selected(args: argparse.Namespace) -> list[Command]:
    """The commands to run (``--quick``, ``--only``) and those whose output they read, in table order."""
    only = args.only.split(",") if args.only else None
    chosen = {
        c.name
        for c in COMMANDS
        if (c.quick or not args.quick) and (only is None or any(o in c.name for o in only))
    }
    chosen |= {producer for c in COMMANDS if c.name in chosen for _, producer, _ in c.needs}
    return [c for c in COMMANDS if c.name in chosen]


def _side_values(
    sides: list[Side], commands: list[Command], files: list[str], out: Path
) -> tuple[dict, dict]:
    """Placeholder values (``{run}``/``{out}`` are set per command) and the environment of each side: no
    PYTHONPATH, the side's venv first on PATH."""
    inputs = make_inputs([Path(f) for f in files], out / "inputs")
    values: dict = {}
    env: dict = {}
    for side in sides:
        values[side.name] = {**inputs, "in": files}
        if any(c.words == "run" for c in commands):
            values[side.name]["pipeline"] = pipeline_config(side, files, out / "inputs")
        env[side.name] = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        env[side.name]["PATH"] = f"{side.venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"
    return values, env


def main(argv: list[str] | None = None) -> int:
    args = _argparser().parse_args(argv)
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    files = [str(p.resolve()) for p in data_files(Path(args.input))]
    if not files:
        raise SystemExit(f"no Parquet/JSONL files under {args.input}")
    commands = _selected(args)
    started = datetime.datetime.now(datetime.UTC)
    load_start = os.getloadavg()
    globals_ = ["--executor", "local", "--workers", str(args.workers), "--small-job-bytes", "0"]
    sides: list[Side] = []
    rows: list[dict] = []
    try:
        sides += [make_side("base", args.base, out), make_side("head", args.head, out)]
        values, env = _side_values(sides, commands, files, out)
        values["globals"] = globals_
        for command in commands:
            run_dir = out / "run" / _slug(command.name)
            for side in sides:
                values[side.name].update(run=str(run_dir), out=str(run_dir / "out"))
                for placeholder, producer, written in command.needs:
                    values[side.name][placeholder] = _base_output(producer, written, out)
            rows.append(compare_command(command, sides, values, out, args.repeat, env))
    finally:
        if not args.keep:
            _remove(sides, out)
    covered = {c.words for c in COMMANDS} | set(EXCLUDED)
    result = {
        "base": {"spec": args.base, "label": sides[0].label, "commit": sides[0].commit},
        "head": {"spec": args.head, "label": sides[1].label, "commit": sides[1].commit},
        "date": started.strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine(),
        "load": [load_start, os.getloadavg()],
        "argv": ["benchmarks/revision_compare.py", *(argv if argv is not None else sys.argv[1:])],
        "input_files": files,
        "repeat": args.repeat,
        "globals": globals_,
        "excluded": EXCLUDED,
        "ignored": [{"pattern": i.pattern, "why": i.why} for i in IGNORED],
        "stripped": [{"pattern": s.pattern, "keys": list(s.keys), "why": s.why} for s in STRIPPED],
        "not_covered": sorted({c for s in sides for c in s.commands} - covered),
        "rows": rows,
    }
    (out / "compare.json").write_text(json.dumps(result, indent=1) + "\n")
    text = markdown(result)
    (out / "compare.md").write_text(text)
    print(text)
    same = all(r["identical"] is not False for r in rows) and not result["not_covered"]
    return 0 if same or args.allow_diff else 1


def _base_output(producer: str, written: str, out: Path) -> str:
    """``written`` as the base revision's ``producer`` left it, copied to ``--out/inputs`` for later rows; if it
    is missing, the reading command fails naming the path, and its row says so."""
    source = out / "kept" / "base" / _slug(producer) / written
    kept = out / "inputs" / f"{_slug(producer)}-{Path(written).name}"
    if source.is_file():
        shutil.copyfile(source, kept)
    return str(kept)


def _remove(sides: list[Side], out: Path) -> None:
    for side in sides:
        if side.worktree:
            subprocess.run(
                ["git", "worktree", "remove", "--force", str(side.tree)], cwd=ROOT, capture_output=True
            )
        if side.venv.is_relative_to(out):
            shutil.rmtree(side.venv, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
