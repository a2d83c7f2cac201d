"""The GPU run in one command: every figure the trainer and the GPU paths owe, each phase under its own time cap.

    python benchmarks/device_check.py --out $OUT/device.json      # on the machine with one CUDA GPU
    python benchmarks/device_check.py --dry-run                    # every phase on the CPU at tiny size (< 1 min)

Phases, in the order they run (``_device_phases.PHASES``; caps in seconds):

1. ``env`` (60): torch, CUDA, the GPU's name and memory, packages, the project's commit and tree digest;
2. ``mfu`` (230): moe-785m at 16×2048, bf16, per-block compiled, 10 warm-up + 30 timed steps of
   ``zephyr.trainer.train``, then the plain compiled torch MoE of the same shape (``_reference_moe``) in the same
   process: tokens/s, MFU (same FLOPs per token, same peak) and their ratio;
3. ``profile`` (60): only when zephyr's MFU is under 30% (always in the dry run): a torch profiler summary of
   the kernels that take the device's time;
4. ``loader`` (90): the same training run fed by ``TokenLoader`` from a token-shard set: the share of step time
   spent getting batches;
5. ``signatures`` (75): MinHash signatures of 100,000 documents with ``--signature-device cuda`` and with the
   CPU kernel: identical integers, and the throughput of both;
6. ``check`` (100): ``zephyr train check --device cuda`` (graph breaks, host syncs, FLOPs, the memory estimate)
   and the peak ``torch.cuda.max_memory_allocated`` of the same step run on the GPU;
7. ``pytest`` (120): ``pytest -m gpu``.

Each phase runs in its own process group and is killed at its cap (or when the run's ``--budget``, 450 s,
runs out); what it had recorded stays (phases write their JSON as they go). A phase whose imports this Python
lacks is skipped with one line naming them.

Where the project comes from: if ``zephyr`` already imports from this checkout (an editable install), as is;
otherwise (the GPU machine: only the working tree travels) from the tree itself, through a folder of symlinks
that lays the top-level folders out as ``zephyr.*`` the way pyproject's ``package-dir`` does, put first on
``PYTHONPATH`` (``--from-tree`` forces this). Nothing is installed into the Python's site-packages. Wheels in
``benchmarks/wheels/`` (``benchmarks/fetch_device_wheels.py`` fetches them) are unpacked into a temporary
folder on ``PYTHONPATH`` when their distribution is missing; torch (and its CUDA stack) never is.

Output: ``--out`` (default ``$OUT/device.json`` when ``$OUT`` is set, else ``benchmarks/.out/device_check/
device.json``) holds every phase's figures; beside it ``device.md`` (the Markdown section, append-ready for
the month's notebook benchmarks/history/<YYYY-MM>.md; its figures fill the pending rows of
benchmarks/RESULTS.md) and ``device.logs/`` (each phase's output). Both files are rewritten after every
phase. Exit status 0 when every phase finished or was skipped cleanly, 1 otherwise; whether the figures meet
the issue's targets is in ``targets`` (and the table), not in the exit status.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import hashlib
import importlib.metadata
import json
import os
import resource
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tomllib
import zipfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
from _device_phases import PHASES, TARGET_MFU, Phase, PhaseSpec, run_phase, sizes_for  # noqa: E402

FORMAT = "zephyr-device-check"
VERSION = 1
BUDGET_S = 450.0
"""All phases together (the issue: at most 8 minutes), setup included; the device tool's limit is 600 s."""
MIN_PHASE_S = 10.0
"""A phase is not started with less time than this left in the budget."""
KILL_GRACE_S = 5.0
NEVER_UNPACK = ("torch", "triton", "nvidia", "cuda")
"""Distributions whose wheels are never unpacked: the machine's own torch and CUDA stack stay."""


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    args.argv = sys.argv[1:] if argv is None else argv
    if args.phase:
        return _child(args)
    return _run(args)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--out", default=None, help="the JSON file (default: $OUT/device.json or benchmarks/.out/...)"
    )
    p.add_argument("--dry-run", action="store_true", help="every phase on the CPU at tiny size")
    p.add_argument("--phases", default=None, help="comma-separated subset, e.g. env,mfu (default: all)")
    p.add_argument("--cap", action="append", default=[], metavar="PHASE=SECONDS", help="change a phase's cap")
    p.add_argument(
        "--budget", type=float, default=BUDGET_S, help=f"seconds for the whole run ({BUDGET_S:.0f})"
    )
    p.add_argument("--commit", default=None, help="the commit to record when the tree has no .git")
    p.add_argument("--from-tree", action="store_true", help="import zephyr from this tree even if installed")
    p.add_argument("--wheels", default=str(HERE / "wheels"), help="folder of wheels for missing modules")
    # Test hooks: hide modules from the phases (the GPU machine's Python), hang a phase after its first save.
    p.add_argument("--simulate-missing", default="", help=argparse.SUPPRESS)
    p.add_argument("--stall", default="", help=argparse.SUPPRESS)
    # The child side: run one phase.
    p.add_argument("--phase", default=None, help=argparse.SUPPRESS)
    p.add_argument("--phase-result", default=None, help=argparse.SUPPRESS)
    p.add_argument("--phase-seconds", type=float, default=None, help=argparse.SUPPRESS)
    p.add_argument("--phase-scratch", default=None, help=argparse.SUPPRESS)
    p.add_argument("--phase-context", default="{}", help=argparse.SUPPRESS)
    return p


# ---- the runner -------------------------------------------------------------------------------------------
def _run(args: argparse.Namespace) -> int:
    started = time.monotonic()
    out = _out_path(args.out)
    logs = out.parent / f"{out.stem}.logs"
    out.parent.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(logs, ignore_errors=True)
    logs.mkdir()
    caps = _caps(args.cap)
    chosen = _chosen(args.phases)
    stall = {s for s in args.stall.split(",") if s}
    report: dict[str, Any] = {
        "format": FORMAT,
        "version": VERSION,
        "dry_run": args.dry_run,
        "command": "python benchmarks/device_check.py " + shlex.join(args.argv),
        "started": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "budget_s": args.budget,
        "project": {"commit": _commit(args.commit), "tree_sha256": _tree_digest()},
        "phases": {},
    }
    with tempfile.TemporaryDirectory(prefix="zephyr-device-check-") as tmp:
        env, setup = _child_env(Path(tmp), args)
        report["setup"] = setup
        _write(out, report)
        context: dict[str, Any] = {"wheel_modules": setup["wheel_modules"]}
        for spec in PHASES:
            if spec.name not in chosen:
                continue
            entry = _run_one(spec, args, env, logs, Path(tmp), caps, started, context, spec.name in stall)
            report["phases"][spec.name] = entry
            _pass_on(spec.name, entry, context, args.dry_run)
            report["wall_s"] = round(time.monotonic() - started, 1)
            report["targets"] = _targets(report)
            _write(out, report)
    markdown = (out.parent / f"{out.stem}.md").read_text()
    print(markdown)
    print(f"wrote {out} and {out.with_suffix('.md')} ({report['wall_s']:.0f} s)")
    return 0 if all(p["status"] in ("ok", "skipped") for p in report["phases"].values()) else 1


def _run_one(
    spec: PhaseSpec,
    args: argparse.Namespace,
    env: dict[str, str],
    logs: Path,
    tmp: Path,
    caps: dict[str, float],
    started: float,
    context: dict[str, Any],
    stall: bool,
) -> dict[str, Any]:
    """One phase in a child process, stopped at min(cap, what the budget has left); its record."""
    cap = caps.get(spec.name, spec.cap_s)
    left = args.budget - (time.monotonic() - started)
    entry: dict[str, Any] = {"title": spec.title, "cap_s": cap, "log": f"{logs.name}/{spec.name}.log"}
    skip = _skip_reason(spec.name, context, args.dry_run)
    if skip:
        return {**entry, "status": "skipped", "reason": skip, "seconds": 0.0, "result": {}}
    if left < MIN_PHASE_S:
        reason = f"not started: {left:.0f} s of the {args.budget:.0f} s budget left"
        return {**entry, "status": "not run", "reason": reason, "seconds": 0.0, "result": {}}
    limit = min(cap, left)
    result_path = logs / f"{spec.name}.json"
    scratch = tmp / f"scratch-{spec.name}"
    scratch.mkdir()
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--phase",
        spec.name,
        "--phase-result",
        str(result_path),
    ]
    cmd += [
        "--phase-seconds",
        str(limit),
        "--phase-scratch",
        str(scratch),
        "--phase-context",
        json.dumps(context),
    ]
    cmd += ["--dry-run"] * args.dry_run + ["--stall", spec.name] * stall
    print(f"[{spec.name}] {spec.title}: cap {limit:.0f} s", flush=True)
    begin, cpu_before = time.monotonic(), _children_cpu_s()
    with open(logs / f"{spec.name}.log", "w") as log:
        proc = subprocess.Popen(
            cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            rc = proc.wait(timeout=limit + KILL_GRACE_S)
            stopped = False
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            rc, stopped = proc.returncode, True
    seconds = round(time.monotonic() - begin, 1)
    cpu_s = round(_children_cpu_s() - cpu_before, 1)
    result = json.loads(result_path.read_text()) if result_path.exists() else {}
    status = result.pop("status", None)
    reason = result.pop("reason", None)
    if stopped:
        status = "timeout"
        kept = ", ".join(result) or "nothing"
        reason = f"stopped at its {limit:.0f} s cap; kept: {kept}"
    elif status is None:
        status, reason = "failed", f"exit {rc} without a result; see {entry['log']}"
    print(f"[{spec.name}] {status} in {seconds:.0f} s" + (f": {reason}" if reason else ""), flush=True)
    return {**entry, "status": status, "reason": reason, "seconds": seconds, "cpu_s": cpu_s, "result": result}


def _children_cpu_s() -> float:
    """CPU seconds (user + system) of this process's finished children and their waited-for descendants."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGTERM the phase's process group (its pytest, compile workers...), then SIGKILL what is left."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=KILL_GRACE_S)
    with contextlib.suppress(ProcessLookupError):  # the leader or a member that outlived SIGTERM
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _skip_reason(name: str, context: dict[str, Any], dry_run: bool) -> str | None:
    if name != "env" and context.get("no_cuda") and not dry_run:
        return (
            "no CUDA device here (torch.cuda.is_available() is False); --dry-run runs every phase on the CPU"
        )
    if name == "profile" and not dry_run:
        mfu = context.get("zephyr_mfu")
        if mfu is None:
            return "runs when the MFU phase measured zephyr's MFU under the target; it did not measure one"
        if mfu >= TARGET_MFU:
            return f"zephyr's MFU {mfu:.1%} meets the {TARGET_MFU:.0%} target"
    return None


def _pass_on(name: str, entry: dict[str, Any], context: dict[str, Any], dry_run: bool) -> None:
    """Figures later phases use: whether there is a GPU, zephyr's MFU and its synthetic-token rate."""
    result = entry["result"]
    if name == "env" and entry["status"] == "ok":
        context["no_cuda"] = not result.get("cuda_available")
    if name == "mfu" and "zephyr" in result:
        context["zephyr_mfu"] = result["zephyr"]["mfu"]
        context["synthetic_tokens_per_s"] = result["zephyr"]["tokens_per_s"]


def _targets(report: dict[str, Any]) -> dict[str, Any]:
    """The issue's acceptance figures: True/False where measured, None where not (or a dry run)."""
    phases = report["phases"]

    def result(name: str) -> dict[str, Any]:
        return phases.get(name, {}).get("result", {})

    mfu = result("mfu").get("zephyr", {}).get("mfu")
    wait = result("loader").get("data_wait_fraction")
    sig = result("signatures").get("identical")
    return {
        "mfu_at_least_30pct": None if mfu is None else mfu >= TARGET_MFU,
        "signatures_identical": sig,
        "data_wait_under_2pct": None if wait is None else wait < 0.02,
        "all_phases_within_8_min": report.get("wall_s", 0) <= 480
        and all(p["status"] in ("ok", "skipped") for p in phases.values()),
    }


# ---- where the phases' Python finds the project and the wheels ----------------------------------------------
def _child_env(tmp: Path, args: argparse.Namespace) -> tuple[dict[str, str], dict[str, Any]]:
    """The phases' environment: ``PYTHONPATH`` = [the tree's symlink folder] + wheels + benchmarks/."""
    env = dict(os.environ)
    # the repo root on sys.path would shadow zephyr.* with the bare zephyr/ folder
    env["PYTHONSAFEPATH"] = "1"
    if args.dry_run:  # a few threads: the dry run runs beside other tests on a shared machine
        env.setdefault("OMP_NUM_THREADS", str(min(4, os.cpu_count() or 1)))
    paths: list[str] = []
    setup: dict[str, Any] = {}
    installed = _installed_from_here(env)
    if installed and not args.from_tree:
        setup["zephyr_from"] = f"installed from this checkout ({installed})"
    else:
        paths.append(str(_tree_folder(tmp / "tree")))
        setup["zephyr_from"] = f"this tree, through symlinks ({REPO})"
    site = tmp / "wheels"
    hidden = {n.strip().lower().replace("_", "-") for n in args.simulate_missing.split(",") if n.strip()}
    unpacked = _unpack_wheels(Path(args.wheels), site, hidden)
    if unpacked:
        paths.append(str(site))
    setup["wheels_unpacked"] = unpacked
    setup["wheel_modules"] = _top_level_modules(site) if unpacked else []
    if args.simulate_missing:
        paths.insert(0, str(_without(tmp / "without", args.simulate_missing.split(","))))
        setup["simulated_missing"] = args.simulate_missing.split(",")
    paths.append(str(HERE))
    env["PYTHONPATH"] = os.pathsep.join(paths + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    return env, setup


def _installed_from_here(env: dict[str, str]) -> str | None:
    """Where ``zephyr.trainer`` imports from in a plain child, if that is this checkout."""
    code = "import zephyr.trainer, zephyr.dedup; print(zephyr.trainer.__file__)"
    done = subprocess.run([sys.executable, "-c", code], cwd="/", env=env, capture_output=True, text=True)
    if done.returncode != 0:
        return None
    where = Path(done.stdout.strip()).resolve()
    return str(where.parent.parent) if where.is_relative_to(REPO) else None


def _tree_folder(root: Path) -> Path:
    """``root/zephyr`` laid out as pyproject's ``package-dir`` maps the folders, in symlinks; returns ``root``."""
    mapping = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    package = root / "zephyr"
    package.mkdir(parents=True)
    for entry in (REPO / mapping["zephyr"]).iterdir():
        if entry.name != "__pycache__":
            (package / entry.name).symlink_to(entry)
    for name, folder in mapping.items():
        if name != "zephyr":
            (package / name.split(".", 1)[1]).symlink_to(REPO / folder)
    return root


def _unpack_wheels(folder: Path, site: Path, hidden: set[str]) -> list[str]:
    """Unpack each wheel in ``folder`` whose distribution this Python lacks (or ``hidden`` hides) into
    ``site``; never torch's."""
    unpacked = []
    for wheel in sorted(folder.glob("*.whl")) if folder.is_dir() else []:
        dist = wheel.name.split("-")[0].lower().replace("_", "-")
        python_tag, abi_tag = wheel.name.split("-")[-3:-1]
        here = f"cp{sys.version_info.major}{sys.version_info.minor}"
        if dist.startswith(NEVER_UNPACK):
            print(f"not unpacking {wheel.name}: this machine's own torch and CUDA stack are used", flush=True)
            continue
        if python_tag.startswith("cp") and abi_tag != "abi3" and here not in python_tag.split("."):
            print(f"not unpacking {wheel.name}: built for {python_tag}, this Python is {here}", flush=True)
            continue
        try:
            importlib.metadata.version(dist)
            if dist not in hidden:
                continue
        except importlib.metadata.PackageNotFoundError:
            pass
        with zipfile.ZipFile(wheel) as zf:
            zf.extractall(site)
        unpacked.append(wheel.name)
    return unpacked


def _top_level_modules(site: Path) -> list[str]:
    """The importable names the unpacked wheels brought (their folders and modules)."""
    names = {
        p.name.removesuffix(".py") for p in site.iterdir() if not p.name.endswith((".dist-info", ".data"))
    }
    return sorted(n for n in names if n.isidentifier())


def _without(tmp: Path, names: list[str]) -> Path:
    """A ``sitecustomize`` folder that swaps each site-packages folder on ``sys.path`` for a copy in symlinks
    lacking ``names``' modules: they are absent as on the GPU machine (``find_spec`` says None), while
    the rest of this Python stays. The dry run's stand-in for that machine (``--simulate-missing``)."""
    hidden = {n.strip().lower().replace("-", "_") for n in names if n.strip()}
    code = "import json, sys; print(json.dumps(sys.path))"  # after site: .pth files may add more folders
    seen = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout)
    folders = [p for p in seen if Path(p).name in ("site-packages", "dist-packages") and Path(p).is_dir()]
    swaps = {}
    for number, folder in enumerate(folders):
        copy = tmp / f"site-{number}"
        copy.mkdir(parents=True)
        for entry in Path(folder).iterdir():
            if entry.name.split(".")[0].split("-")[0].lower() not in hidden:
                (copy / entry.name).symlink_to(entry)
        swaps[str(Path(folder))] = str(copy)
    custom = tmp / "custom"
    custom.mkdir()
    (custom / "sitecustomize.py").write_text(
        f"import sys\n_SWAPS = {swaps!r}\nsys.path[:] = [_SWAPS.get(p.rstrip('/'), p) for p in sys.path]\n"
    )
    return custom


# ---- the project's identity -------------------------------------------------------------------------------
def _commit(given: str | None) -> str:
    if given:
        return given
    try:
        done = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True
        )
    except FileNotFoundError:  # no git on the machine
        return "unknown (no git here; pass --commit)"
    if done.returncode != 0:
        return "unknown (no .git here; pass --commit)"
    dirty = subprocess.run(
        ["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    return done.stdout.strip() + ("+uncommitted changes" if dirty else "")


def _tree_digest() -> str:
    """sha256 over the project's Python sources and pyproject.toml (path and bytes, sorted): names the code
    that ran even where the tree came without its .git."""
    digest = hashlib.sha256()
    folders = ("zephyr", "shuffle", "dedup", "tokenize", "trainer", "pipelines", "benchmarks", "tests")
    files = [REPO / "pyproject.toml"] + sorted(
        p
        for f in folders
        for p in (REPO / f).rglob("*.py")
        if not any(part.startswith(".") for part in p.parts)
    )
    for path in files:
        digest.update(str(path.relative_to(REPO)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


# ---- output -----------------------------------------------------------------------------------------------
def _out_path(given: str | None) -> Path:
    if given:
        return Path(given).resolve()
    base = Path(os.environ["OUT"]) if os.environ.get("OUT") else HERE / ".out" / "device_check"
    return (base / "device.json").resolve()


def _write(out: Path, report: dict[str, Any]) -> None:
    tmp = out.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(report, indent=1, default=str))
    os.replace(tmp, out)
    out.with_suffix(".md").write_text(markdown(report))


def markdown(report: dict[str, Any]) -> str:
    """The notebook section (benchmarks/history/<YYYY-MM>.md): a heading with the machine, the command, one
    row per phase, the targets."""
    env = report["phases"].get("env", {}).get("result", {})
    device = env.get("gpu") or ("CPU (dry run)" if report["dry_run"] else "no GPU")
    where = f"{device}" + (f", {env['gpu_memory_gib']} GiB" if env.get("gpu_memory_gib") else "")
    date = report["started"][:10]
    lines = [
        f"### Device check{' (dry run)' if report['dry_run'] else ''} — {date}, {where}, torch {env.get('torch', '?')}"
        f" (CUDA {env.get('cuda') or '—'}), commit {report['project']['commit']}",
        "",
        f"Command: `{report['command'].strip()}`; {report.get('wall_s', 0):.0f} s in all "
        f"(budget {report['budget_s']:.0f} s); tree sha256 {report['project']['tree_sha256']}; "
        f"zephyr {report.get('setup', {}).get('zephyr_from', '?')}.",
        "",
        "| phase | status | s (cap) | result |",
        "|---|---|---|---|",
    ]
    for name, phase in report["phases"].items():
        text = _ROW.get(name, lambda r: "")(phase["result"]) if phase["status"] in ("ok", "timeout") else ""
        if phase.get("reason"):
            text = f"{text}; {phase['reason']}" if text else phase["reason"]
        lines.append(
            f"| {phase['title']} | {phase['status']} | {phase['seconds']:.0f} ({phase['cap_s']:.0f}) | {text} |"
        )
    targets = report.get("targets", {})
    shown = {True: "met", False: "**missed**", None: "not measured"}
    lines += [
        "",
        ("Targets (dry run: the CPU's figures, not the GPU's): " if report["dry_run"] else "Targets: ")
        + "; ".join(f"{_TARGET_NAMES[k]} {shown[v]}" for k, v in targets.items())
        + ("." if targets else "none yet."),
        "",
    ]
    return "\n".join(lines)


_TARGET_NAMES = {
    "mfu_at_least_30pct": "MFU ≥ 30%",
    "signatures_identical": "signatures identical to the CPU kernel",
    "data_wait_under_2pct": "data wait < 2% of step time",
    "all_phases_within_8_min": "all phases within 8 minutes",
}


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def _row_env(r: dict[str, Any]) -> str:
    gpu = r.get("gpu") or "no CUDA device"
    extra = f", {r['gpu_memory_gib']} GiB, sm {r['compute_capability']}" if r.get("gpu") else ""
    return f"{gpu}{extra}; Python {r.get('python')}, torch {r.get('torch')}, {r.get('cpus')} CPUs"


def _row_mfu(r: dict[str, Any]) -> str:
    parts = []
    for key, name in (("zephyr", "zephyr trainer"), ("reference", "plain reference")):
        if key in r:
            run = r[key]
            parts.append(
                f"{name} {run['tokens_per_s']:,.0f} tok/s, MFU {_pct(run['mfu'])}"
                + (f", peak {run['peak_memory_gib']:.1f} GiB" if "peak_memory_gib" in run else "")
            )
    if "zephyr_over_reference" in r:
        parts.append(f"zephyr/reference {r['zephyr_over_reference']:.2f}×")
    return f"{r.get('preset')} {r.get('batch')}, {r.get('timed_steps')} timed steps: " + "; ".join(parts)


def _row_profile(r: dict[str, Any]) -> str:
    top = r.get("top", [])[:5]
    return "top kernels: " + ", ".join(f"{t['name'][:40]} {100 * t['share']:.0f}%" for t in top)


def _row_loader(r: dict[str, Any]) -> str:
    if "data_wait_fraction" not in r:
        return ""
    over = r.get("over_synthetic_tokens_per_s")
    return (
        f"data wait {_pct(r['data_wait_fraction'])} of step time (worst step {_pct(r['data_wait_fraction_max_step'])}),"
        f" {r['tokens_per_s']:,.0f} tok/s" + (f" = {over:.2f}× the synthetic-token run" if over else "")
    )


def _row_signatures(r: dict[str, Any]) -> str:
    parts = [f"{r.get('documents', 0):,} docs, {r.get('shingles', 0):,} shingles × {r.get('num_perm')} perms"]
    for scheme, s in r.get("schemes", {}).items():
        same = "identical" if s["identical"] else f"**{s['documents_differing']} docs differ**"
        parts.append(
            f"{scheme}: {same}, "
            f"{r['device']} {s['device_docs_per_s']:,} docs/s vs CPU kernel {s['cpu_kernel_docs_per_s']:,} "
            f"({s['device_over_cpu_speed']:.3g}×)"
        )
    return "; ".join(parts)


def _row_check(r: dict[str, Any]) -> str:
    c = r.get("check")
    if not c:
        return ""
    text = (
        f"{c['graph_breaks']} graph breaks, {c['host_syncs']} host syncs, FLOPs ×{c['flops_measured_over_formula']:.4f}"
        f" of the formula, peak estimated {c['peak_memory_gib']:.3g} GiB"
    )
    measured = r.get("measured", {})
    if measured.get("max_allocated_gib") is not None:
        text += f", measured {measured['max_allocated_gib']:.3g} GiB (×{r['measured_over_estimate']:.3f})"
    return text + ("" if c["ok"] else f"; check not ready: {'; '.join(c['problems'])}")


def _row_pytest(r: dict[str, Any]) -> str:
    counts = r.get("counts") or {}
    text = ", ".join(f"{n} {k}" for k, n in counts.items()) or "no test ran"
    if r.get("left_out"):
        text += "; left out: " + "; ".join(f"{f} ({why})" for f, why in r["left_out"].items())
    return text


_ROW = {
    "env": _row_env,
    "mfu": _row_mfu,
    "profile": _row_profile,
    "loader": _row_loader,
    "signatures": _row_signatures,
    "check": _row_check,
    "pytest": _row_pytest,
}


def _caps(items: list[str]) -> dict[str, float]:
    caps = {}
    names = {s.name for s in PHASES}
    for item in items:
        name, _, seconds = item.partition("=")
        if name not in names or not seconds:
            raise SystemExit(
                f"--cap {item!r}: give PHASE=SECONDS with PHASE one of {', '.join(sorted(names))}"
            )
        caps[name] = float(seconds)
    return caps


def _chosen(given: str | None) -> set[str]:
    names = [s.name for s in PHASES]
    if not given:
        return set(names)
    chosen = {n.strip() for n in given.split(",") if n.strip()}
    unknown = chosen - set(names)
    if unknown:
        raise SystemExit(f"--phases: unknown {', '.join(sorted(unknown))}; choose among {', '.join(names)}")
    return chosen


# ---- the child side ---------------------------------------------------------------------------------------
def _child(args: argparse.Namespace) -> int:
    spec = next(s for s in PHASES if s.name == args.phase)
    phase = Phase(
        name=spec.name,
        device="cpu" if args.dry_run else "cuda",
        sizes=sizes_for(args.dry_run),
        deadline=time.monotonic() + args.phase_seconds,
        result_path=Path(args.phase_result),
        scratch=Path(args.phase_scratch),
        context=json.loads(args.phase_context),
        stall=args.stall == spec.name,
    )
    return run_phase(spec, phase)


if __name__ == "__main__":
    sys.exit(main())
