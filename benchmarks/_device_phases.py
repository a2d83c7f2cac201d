"""The phases of ``benchmarks/device_check.py``: what each measures on the GPU (or on the CPU at tiny size with
``--dry-run``). Each runs in its own child process (``device_check.py --phase NAME``) and records into a
``Phase``: every ``save`` rewrites the phase's JSON file at once, so a phase stopped at its time cap keeps
what it had finished. This module imports only the standard library at the top: the runner reads ``PHASES``
without torch, and a phase's own imports come inside it (a missing module skips that phase alone).

Sizes (``Sizes``): the real run measures moe-785m at 16 × 2048 in bf16, compiled, 10 warm-up + 30 timed
steps; the dry run the ``tiny`` preset at 2 × 64, eager (the reference model compiled with the
``aot_eager`` backend, which traces like inductor without generating code), 2 + 3 steps.
"""

from __future__ import annotations

import ast
import gc
import importlib.util
import json
import os
import re
import statistics
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
GIB = 1024**3
TARGET_MFU = 0.30
NUM_PERM = 112  # datatrove's 14 bands x 8 rows
SHINGLE_WORDS = 5


@dataclass(frozen=True)
class Sizes:
    """How big each phase runs: ``FULL`` on the GPU, ``DRY`` on the CPU."""

    preset: str
    batch_size: int
    seq_len: int
    warmup_steps: int
    timed_steps: int
    compile: bool
    """Per-block ``torch.compile`` of zephyr's trainer (inductor)."""
    reference_backend: str
    """``torch.compile`` backend of the reference model's blocks."""
    signature_docs: int
    words_per_doc: tuple[int, int]
    loader_warmup_steps: int
    loader_timed_steps: int
    profile_steps: int


FULL = Sizes("moe-785m", 16, 2048, 10, 30, True, "inductor", 100_000, (50, 800), 5, 20, 4)
DRY = Sizes("tiny", 2, 64, 2, 3, False, "aot_eager", 400, (0, 60), 1, 3, 1)


@dataclass
class Phase:
    """One phase's run: where it writes, its deadline, and what it has recorded so far."""

    name: str
    device: str
    """``cuda`` on the GPU, ``cpu`` for the dry run."""
    sizes: Sizes
    deadline: float
    """``time.monotonic()`` by which the phase should be done (the runner kills it a little later)."""
    result_path: Path
    scratch: Path
    context: dict[str, Any] = field(default_factory=dict)
    """Figures of earlier phases the runner passes on (the MFU phase's tokens/s to the loader phase)."""
    stall: bool = False
    """Test hook: hang after the first save, so the runner's cap has to stop the phase."""
    result: dict[str, Any] = field(default_factory=dict)

    @property
    def dry_run(self) -> bool:
        return self.device == "cpu"

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def save(self, **entries: Any) -> None:
        self.result.update(entries)
        tmp = self.result_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.result, indent=1, default=str))
        os.replace(tmp, self.result_path)
        if self.stall:
            print(f"{self.name}: stalling after the first save (--stall)", flush=True)
            while True:
                time.sleep(60)


@dataclass(frozen=True)
class PhaseSpec:
    name: str
    title: str
    cap_s: float
    needs: tuple[str, ...]
    """Modules the phase imports; one missing skips the phase with its name."""
    run: Callable[[Phase], None]


# ---- 1. environment ---------------------------------------------------------------------------------------
def environment(p: Phase) -> None:
    """torch, CUDA, the GPU's name and memory, the packages the other phases use, where zephyr imports from."""
    import platform

    p.save(python=platform.python_version(), platform=platform.platform(), cpus=os.cpu_count())
    import torch

    info: dict[str, Any] = {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cuda_available": torch.cuda.is_available(),
    }
    if torch.cuda.is_available():
        from zephyr.trainer.devices import peak_flops_for

        props = torch.cuda.get_device_properties(0)
        info.update(
            gpu=props.name,
            gpu_count=torch.cuda.device_count(),
            gpu_memory_gib=round(props.total_memory / GIB, 1),
            compute_capability=f"{props.major}.{props.minor}",
            peak_bf16_tflops=(peak_flops_for(props.name) or 0) / 1e12 or None,
            grouped_mm=hasattr(torch, "_grouped_mm"),
        )
    import zephyr.trainer

    info["zephyr_imported_from"] = str(Path(zephyr.trainer.__file__).parent.parent)
    names = (
        "numpy",
        "pyarrow",
        "numba",
        "fsspec",
        "polars",
        "zstandard",
        *p.context.get("wheel_modules", []),
    )
    info["packages"] = {name: _version(name) for name in names}
    p.save(**info)


def missing(module: str) -> bool:
    """Whether ``module`` cannot be imported here (absent, or hidden by the dry run's ``--simulate-missing``)."""
    try:
        return importlib.util.find_spec(module) is None
    except ImportError:
        return True


def _version(module: str) -> str | None:
    if missing(module):
        return None
    try:
        return str(__import__(module).__version__)
    except Exception as exc:  # a module that is there but does not import says why
        return f"import fails: {exc}"


# ---- 2. pytest -m gpu -------------------------------------------------------------------------------------
_RESULT_LINE = re.compile(r"^(\S+::\S+)\s+(PASSED|FAILED|SKIPPED|ERROR|XFAIL|XPASS)")


def gpu_tests(p: Phase) -> None:
    """``pytest -m gpu`` on the test files holding GPU tests; a file importing a module this machine lacks is
    left out with that module's name (``pytest`` would fail to collect it)."""
    files, left_out = [], {}
    for path in sorted((REPO / "tests").rglob("test_*.py")):
        text = path.read_text()
        if not re.search(r"mark\.gpu\b", text):
            continue
        lacking = sorted(m for m in _top_level_imports(text) if missing(m))
        rel = str(path.relative_to(REPO))
        if lacking:
            left_out[rel] = f"needs {', '.join(lacking)}"
        else:
            files.append(rel)
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-m",
        "gpu",
        "-v",
        "-rA",
        "-p",
        "no:cacheprovider",
        "-o",
        "addopts=",
    ]
    cmd += ["--import-mode=importlib", "--strict-markers", *files]  # pyproject's filterwarnings still apply
    p.save(command="python -m pytest -m gpu " + " ".join(files), files=files, left_out=left_out, tests={})
    if not files:
        p.save(summary="no test file could be collected")
        return
    tests: dict[str, str] = {}
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    tail: list[str] = []
    try:
        for line in proc.stdout:
            print(line, end="", flush=True)
            tail = (tail + [line.rstrip()])[-30:]
            if (m := _RESULT_LINE.match(line)) and m.group(1) not in tests:
                tests[m.group(1)] = m.group(2).lower()
                p.save(tests=dict(tests))
            if p.left() < 0:
                proc.kill()
                p.save(stopped="the phase's cap came before pytest finished")
                break
    finally:
        rc = proc.wait()
    counts = {k: sum(v == k for v in tests.values()) for k in sorted(set(tests.values()))}
    p.save(tests=tests, counts=counts, returncode=rc, output_tail=tail if rc not in (0, 5) else tail[-3:])


def _top_level_imports(source: str) -> set[str]:
    """Top-level packages a test module imports at module level, other than the project's and the stdlib."""
    names: set[str] = set()
    for node in ast.parse(source).body:
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return {
        n for n in names if n not in sys.stdlib_module_names and n not in ("zephyr", "tests", "__future__")
    }


# ---- 3. zephyr train check + the measured peak ------------------------------------------------------------
def train_check(p: Phase) -> None:
    """``zephyr train check --device cuda`` (graph breaks, host syncs, FLOPs, the memory estimate), then the
    same step run on the GPU: ``torch.cuda.max_memory_allocated`` over the second step, beside the estimate."""
    import torch

    s = p.sizes
    args = ["train", "check", "--preset", s.preset, "--batch-size", str(s.batch_size), "--seq-len"]
    args += [str(s.seq_len), "--device", "cuda", "--dispatch", "grouped_mm", "--no-measure-memory", "--json"]
    if p.device == "cuda":  # the real device's peak FLOPS and memory, not the H100 default
        props = torch.cuda.get_device_properties(0)
        args += ["--gpu", props.name, "--device-memory", f"{props.total_memory}B"]
    shown = "zephyr " + " ".join(args)
    p.save(command=shown)
    start = time.perf_counter()
    done = _python([sys.executable, "-m", "zephyr.cli", *args], p)
    lacking = re.findall(r"ModuleNotFoundError: No module named '([\w.]+)'", done.stderr)
    if not done.stdout.strip() and lacking:
        # The zephyr CLI's main claims and logs through zephyr.io (zstandard), which the check itself does
        # not need. The same command, its flags and its run, without main:
        p.save(ran_as=f"zephyr.trainer.cli (the zephyr CLI cannot start here: it imports {lacking[-1]})")
        code = (
            "import argparse, sys\nfrom zephyr.flags import add_flags, config_from_flags\n"
            "from zephyr.summary import emit\nfrom zephyr.trainer.cli import COMMANDS\n"
            "command = next(c for c in COMMANDS if c.words == 'train check')\n"
            "parser = argparse.ArgumentParser()\nparser.add_argument('--json', action='store_true')\n"
            "for cls in command.options.values():\n    add_flags(parser, cls, skip=command.skip)\n"
            "given = vars(parser.parse_args(sys.argv[1:]))\n"
            "configs = {name: config_from_flags(cls, given) for name, cls in command.options.items()}\n"
            "out = command.run(**configs, execution=None)  # the summary object every command prints\n"
            "emit(out, command='zephyr train check', seconds=0.0, inputs=None, as_json=True)\n"
            "sys.exit(out.exit_code)\n"
        )
        done = _python([sys.executable, "-c", code, *args[2:]], p)
    if not done.stdout.strip():
        raise RuntimeError(
            f"{shown} printed no report (exit {done.returncode}): {done.stderr.strip()[-300:]}"
        )
    report = json.loads(done.stdout)["details"]  # the summary object; the check's report is its details
    keys = ("graph_breaks", "host_syncs", "static_shapes", "flops_measured_over_formula", "peak_memory_gib")
    p.save(
        check_seconds=round(time.perf_counter() - start, 1),
        check={
            k: report[k] for k in (*keys, "step_time_s_for_target_mfu", "ok", "problems", "default_dispatch")
        },
    )
    measured = _measured_peak(p, report["default_dispatch"])
    estimate = report["peak_memory_gib"]
    p.save(
        measured=measured,
        measured_over_estimate=(
            round(measured["max_allocated_gib"] / estimate, 4) if measured.get("max_allocated_gib") else None
        ),
    )


def _python(cmd: list[str], p: Phase) -> subprocess.CompletedProcess:
    """Run ``cmd`` from the repository root within the phase's time (30 s kept for the GPU measurement)."""
    done = subprocess.run(
        cmd, cwd=REPO, capture_output=True, text=True, timeout=max(5.0, p.left() - 30), check=False
    )
    print(done.stderr[-4000:], flush=True)
    return done


def _measured_peak(p: Phase, dispatch: str) -> dict[str, Any]:
    """Run the estimated step (trainer builders, fused AdamW, bf16 autocast, SDPA, eager) twice on the device;
    the second step's peak is what the estimate predicts (the first creates the AdamW state)."""
    import torch
    from zephyr.trainer.check import Target, build, run_step, synthetic_batch
    from zephyr.trainer.config import get_preset
    from zephyr.trainer.devices import resolve_device

    s = p.sizes
    info = resolve_device(p.device)
    target = Target(get_preset(s.preset), s.batch_size, s.seq_len, info, dispatch, "sdpa")
    model, optimizer = build(target)
    batches = [{k: v.to(info.device) for k, v in synthetic_batch(target, i).items()} for i in (0, 1)]
    run_step(target, model, optimizer, batches[0])
    if p.device != "cuda":
        run_step(target, model, optimizer, batches[1])
        return {"note": "dry run on the CPU: the step ran; device memory is measured on CUDA only"}
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    run_step(target, model, optimizer, batches[1])
    torch.cuda.synchronize()
    return {
        "max_allocated_gib": round(torch.cuda.max_memory_allocated() / GIB, 3),
        "max_reserved_gib": round(torch.cuda.max_memory_reserved() / GIB, 3),
        "what": "second eager step, SDPA, grouped_mm, bf16 autocast, fused AdamW: the configuration estimated",
    }


# ---- 4. MFU, zephyr's trainer beside the plain reference --------------------------------------------------
def mfu(p: Phase) -> None:
    """Tokens/s and MFU of ``zephyr.trainer.train`` and of the plain compiled reference, same process, same
    shape, same FLOPs per token (``flops_per_token``), same peak; zephyr first (it is the figure that counts)."""
    import torch
    from zephyr.trainer.config import get_preset
    from zephyr.trainer.devices import peak_flops_for
    from zephyr.trainer.model import count_params, flops_per_token

    s = p.sizes
    model_cfg = get_preset(s.preset)
    counts = count_params(model_cfg)
    fpt = flops_per_token(model_cfg, s.seq_len)
    peak = peak_flops_for(torch.cuda.get_device_name()) if p.device == "cuda" else None
    p.save(
        preset=s.preset,
        params_total=counts.total,
        params_active=counts.active,
        batch=f"{s.batch_size}x{s.seq_len}",
        tokens_per_step=s.batch_size * s.seq_len,
        flops_per_token=fpt,
        peak_tflops=peak / 1e12 if peak else None,
        warmup_steps=s.warmup_steps,
        timed_steps=s.timed_steps,
    )
    zephyr, _ = _zephyr_run(p, fpt, peak, data=None)
    p.save(zephyr=zephyr)
    _release(p.device)
    reference = _reference_run(p, model_cfg, fpt, peak, counts.active)
    p.save(
        reference=reference,
        zephyr_over_reference=round(zephyr["tokens_per_s"] / reference["tokens_per_s"], 4),
    )


def _zephyr_run(
    p: Phase, fpt: float, peak: float | None, *, data: str | None, steps: tuple[int, int] | None = None
) -> tuple[dict, list[dict]]:
    """``train()`` as ``zephyr train`` runs it (synthetic tokens, or the shard set ``data``); the timed steps'
    medians from its own records (device time between steps, read one step late)."""
    import torch
    from zephyr.trainer.config import OptimConfig, TrainConfig
    from zephyr.trainer.train import train

    s = p.sizes
    warmup, timed = steps or (s.warmup_steps, s.timed_steps)
    cfg = TrainConfig(
        preset=s.preset,
        data=data,
        steps=warmup + timed,
        batch_size=s.batch_size,
        seq_len=s.seq_len,
        device=p.device,
        dtype="bf16",
        compile=s.compile,
        log_every=0,
        optim=OptimConfig(lr=3e-4, warmup_steps=min(10, warmup + timed)),
    )
    if p.device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    result = train(cfg)
    records = result.records[warmup:]
    out = {
        **_throughput([r["step_time_s"] for r in records], s.batch_size * s.seq_len, fpt, peak),
        "wall_s_with_compile": round(time.perf_counter() - start, 1),
        "final_loss": round(result.losses[-1], 4),
        "compile": s.compile,
    }
    if p.device == "cuda":
        out["peak_memory_gib"] = round(torch.cuda.max_memory_allocated() / GIB, 3)
    return out, records


def _reference_run(p: Phase, model_cfg: Any, fpt: float, peak: float | None, zephyr_active: int) -> dict:
    """The plain model of ``_reference_moe``: blocks compiled one by one (``fullgraph``: a break would be a
    failure, not a silent slowdown), AdamW fused on CUDA, random tokens already on the device."""
    import torch
    from _reference_moe import ReferenceMoE, active_params, reference_step

    s = p.sizes
    torch.manual_seed(0)
    with torch.device(p.device):
        model = ReferenceMoE(model_cfg, dispatch="grouped_mm")
    for block in model.blocks:
        block.compile(backend=s.reference_backend, fullgraph=True)
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=p.device == "cuda"
    )
    autocast = torch.autocast(p.device, dtype=torch.bfloat16)
    gen = torch.Generator().manual_seed(0)
    data = [
        torch.randint(0, model_cfg.vocab_size, (s.batch_size, s.seq_len + 1), generator=gen).to(p.device)
        for _ in range(4)
    ]
    if p.device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    clock = _StepClock(p.device)
    start = time.perf_counter()
    loss = None
    for step in range(s.warmup_steps + s.timed_steps):
        ids = data[step % len(data)]
        loss = reference_step(model, optimizer, ids[:, :-1], ids[:, 1:], autocast)
        clock.mark()
    step_s = clock.seconds()[s.warmup_steps - 1 :]
    out = {
        **_throughput(step_s, s.batch_size * s.seq_len, fpt, peak),
        "wall_s_with_compile": round(time.perf_counter() - start, 1),
        "final_loss": round(float(loss), 4),
        "compile_backend": s.reference_backend,
        "dispatch": "grouped_mm",
        "attention": "SDPA causal (no document mask)",
        "params_active": active_params(model),
        "same_active_params_as_zephyr": active_params(model) == zephyr_active,
    }
    if p.device == "cuda":
        out["peak_memory_gib"] = round(torch.cuda.max_memory_allocated() / GIB, 3)
    return out


def _throughput(step_s: list[float], tokens_per_step: int, fpt: float, peak: float | None) -> dict[str, Any]:
    """tokens/s at the median step time (robust to a slow step), its MFU, and the step times themselves."""
    median = statistics.median(step_s)
    tps = tokens_per_step / median
    return {
        "tokens_per_s": round(tps, 1),
        "mfu": round(tps * fpt / peak, 4) if peak else None,
        "step_time_s": {
            "median": round(median, 5),
            "min": round(min(step_s), 5),
            "max": round(max(step_s), 5),
        },
        "steps_timed": len(step_s),
        "step_times_s": [round(t, 5) for t in step_s],
    }


class _StepClock:
    """Device time between consecutive ``mark()``s: CUDA events (no host sync inside the loop) or the CPU clock."""

    def __init__(self, device: str) -> None:
        import torch

        self.cuda = device == "cuda"
        self.marks: list[Any] = []
        self._torch = torch

    def mark(self) -> None:
        if self.cuda:
            event = self._torch.cuda.Event(enable_timing=True)
            event.record()
            self.marks.append(event)
        else:
            self.marks.append(time.perf_counter())

    def seconds(self) -> list[float]:
        if self.cuda:
            self._torch.cuda.synchronize()
            return [a.elapsed_time(b) / 1e3 for a, b in zip(self.marks, self.marks[1:])]
        return [b - a for a, b in zip(self.marks, self.marks[1:])]


def _release(device: str) -> None:
    import torch

    torch._dynamo.reset()
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()


# ---- 4b. profile (when the MFU misses its target) ---------------------------------------------------------
def profile(p: Phase) -> None:
    """A few steps of zephyr's trainer under ``torch.profiler``: the kernels that take the device's time."""
    import torch
    from torch.profiler import ProfilerActivity
    from zephyr.trainer.config import get_preset
    from zephyr.trainer.model import flops_per_token

    s = p.sizes
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if p.device == "cuda" else [])
    fpt = flops_per_token(get_preset(s.preset), s.seq_len)
    with torch.profiler.profile(activities=activities) as prof:
        run, _ = _zephyr_run(p, fpt, None, data=None, steps=(1, s.profile_steps))
    key = "self_device_time_total" if p.device == "cuda" else "self_cpu_time_total"
    events = [e for e in prof.key_averages() if getattr(e, key, 0) > 0]
    total = sum(getattr(e, key) for e in events) or 1
    top = sorted(events, key=lambda e: getattr(e, key), reverse=True)[:15]
    p.save(
        steps=1 + s.profile_steps,
        measured=key,
        total_ms=round(total / 1e3, 2),
        top=[
            {
                "name": e.key[:120],
                "ms": round(getattr(e, key) / 1e3, 3),
                "share": round(getattr(e, key) / total, 4),
                "calls": e.count,
            }
            for e in top
        ],
        tokens_per_s=run["tokens_per_s"],
        table=prof.key_averages().table(sort_by=key, row_limit=15, max_name_column_width=60),
    )


# ---- 5. MinHash signatures on the GPU against the CPU kernel ----------------------------------------------
def signatures(p: Phase) -> None:
    """``signatures_on(..., "cuda")`` (``--signature-device cuda``) against the compiled CPU kernel on the same
    word 5-gram shingles of ``signature_docs`` synthetic documents (a few empty, one long): equal integers,
    and the time of each (best of two after a warm-up on 64 documents)."""
    import numpy as np
    from zephyr.dedup._hashing import Shingles, shingle_hashes
    from zephyr.dedup._minhash import make_permutations, signatures_on

    s = p.sizes
    texts = _synthetic_texts(s.signature_docs, s.words_per_doc)
    start = time.perf_counter()
    shingles = shingle_hashes(texts, n=SHINGLE_WORDS)
    device = "cuda" if p.device == "cuda" else "torch-cpu"
    p.save(
        documents=len(shingles),
        shingles=int(len(shingles.hashes)),
        text_mib=round(texts.nbytes / 2**20, 1),
        shingle_seconds=round(time.perf_counter() - start, 3),
        num_perm=NUM_PERM,
        device=device,
        schemes={},
    )
    few = Shingles(shingles.hashes[: shingles.offsets[64]], shingles.offsets[:65])
    schemes: dict[str, Any] = {}
    for scheme in ("affine64", "mersenne61"):
        perms = make_permutations(NUM_PERM, seed=1, scheme=scheme)
        signatures_on(few, perms, "cpu")
        signatures_on(few, perms, device)
        cpu_s, ref = _best_of(2, lambda perms=perms: signatures_on(shingles, perms, "cpu"))
        dev_s, got = _best_of(2, lambda perms=perms: signatures_on(shingles, perms, device))
        work = len(shingles.hashes) * NUM_PERM
        schemes[scheme] = {
            "identical": bool(np.array_equal(ref, got)),
            "documents_differing": int((ref != got).any(axis=1).sum()),
            "cpu_kernel_s": round(cpu_s, 4),
            "device_s": round(dev_s, 4),
            "cpu_kernel_docs_per_s": round(len(shingles) / cpu_s),
            "device_docs_per_s": round(len(shingles) / dev_s),
            "device_over_cpu_speed": round(cpu_s / dev_s, 3),
            "cpu_kernel_ns_per_shingle_perm": round(cpu_s / work * 1e9, 4),
            "device_ns_per_shingle_perm": round(dev_s / work * 1e9, 4),
        }
        p.save(schemes=dict(schemes))
    p.save(identical=all(v["identical"] for v in schemes.values()))


def _synthetic_texts(num_docs: int, words: tuple[int, int]) -> Any:
    """``num_docs`` documents of ``words`` random words each (8-byte words ``w012345 ``, 50,000 of them), built
    as one Arrow buffer; document 0 is empty and document 1 has 20,000 words (the edge shapes)."""
    import numpy as np
    import pyarrow as pa

    rng = np.random.default_rng(0)
    lengths = rng.integers(words[0], words[1] + 1, size=num_docs)
    lengths[0] = 0
    if num_docs > 1:
        lengths[1] = 20_000
    table = np.frombuffer("".join(f"w{i:06d} " for i in range(50_000)).encode(), dtype=np.uint8).reshape(
        -1, 8
    )
    data = table[rng.integers(0, len(table), size=int(lengths.sum()))].reshape(-1)
    offsets = np.concatenate([[0], np.cumsum(lengths * 8)]).astype(np.int64)
    return pa.LargeStringArray.from_buffers(num_docs, pa.py_buffer(offsets), pa.py_buffer(data))


def _best_of(repeat: int, fn: Callable[[], Any]) -> tuple[float, Any]:
    best, out = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - start)
    return best, out


# ---- 6. the streaming loader feeding the step -------------------------------------------------------------
def loader(p: Phase) -> None:
    """``train()`` on a token-shard set (``TokenLoader``, tokens packing) at the MFU phase's configuration: the
    share of step time the step loop spent getting its batches (``data_loading_s`` of each record over its
    ``step_time_s``, torchtitan's data_loading(%)), and tokens/s beside the synthetic-token run."""
    from zephyr.trainer.config import get_preset
    from zephyr.trainer.model import flops_per_token

    s = p.sizes
    model_cfg = get_preset(s.preset)
    steps = s.loader_warmup_steps + s.loader_timed_steps
    tokens = max(100_000, int(1.5 * steps * s.batch_size * (s.seq_len + 1)))
    shards = p.scratch / "shards"
    start = time.perf_counter()
    _token_shards(shards, tokens, model_cfg.vocab_size)
    p.save(shard_tokens=tokens, shard_build_s=round(time.perf_counter() - start, 2))
    fpt = flops_per_token(model_cfg, s.seq_len)
    run, records = _zephyr_run(
        p, fpt, None, data=str(shards), steps=(s.loader_warmup_steps, s.loader_timed_steps)
    )
    data_s = [r["data_loading_s"] for r in records]
    step_s = [r["step_time_s"] for r in records]
    synthetic = p.context.get("synthetic_tokens_per_s")
    p.save(
        steps_timed=len(records),
        data_wait_fraction=round(sum(data_s) / sum(step_s), 5),
        data_wait_fraction_max_step=round(max(d / t for d, t in zip(data_s, step_s)), 5),
        data_loading_s_median=round(statistics.median(data_s), 6),
        step_time_s_median=round(statistics.median(step_s), 5),
        tokens_per_s=run["tokens_per_s"],
        over_synthetic_tokens_per_s=round(run["tokens_per_s"] / synthetic, 4) if synthetic else None,
        packing="tokens",
    )


def _token_shards(directory: Path, tokens: int, vocab_size: int) -> None:
    """A token-shard set (format version 1, ``zephyr.tokenize.shards``) of ``tokens`` random ids below
    ``vocab_size`` (so the model is not widened), documents of 1..4000 tokens, 4 shards. Written with numpy
    alone, as a training node reads it: zephyr's shard writer belongs to the data side (``zephyr.io``)."""
    import numpy as np
    from zephyr.tokenize.shards import (
        FORMAT_NAME,
        FORMAT_VERSION,
        ShardFile,
        ShardInfo,
        sha256_file,
        token_dtype,
    )

    directory.mkdir(parents=True)
    rng = np.random.default_rng(0)
    dtype = token_dtype(vocab_size)
    eos = vocab_size - 1
    shards = []
    for index in range(4):
        lengths = rng.integers(1, 4000, size=tokens // 4 // 1000 + 8)
        lengths = lengths[: max(1, int(np.searchsorted(np.cumsum(lengths), tokens // 4)))]
        ids = rng.integers(0, eos, size=int(lengths.sum())).astype(dtype)
        ids[np.cumsum(lengths) - 1] = eos
        name = f"shard-{index:05d}"
        files = {}
        for kind, array in (
            ("tokens", ids),
            ("offsets", np.concatenate([[0], np.cumsum(lengths)]).astype("<i8")),
        ):
            path = directory / f"{name}.{kind}.npy"
            np.save(path, array)
            files[kind] = ShardFile(path.name, sha256_file(str(path)), path.stat().st_size)
        shards.append(ShardInfo(name, len(ids), len(lengths), files).to_json())
    manifest = {
        "format": FORMAT_NAME,
        "version": FORMAT_VERSION,
        "dtype": dtype.name,
        "vocab_size": vocab_size,
        "eos_id": eos,
        "bos_id": None,
        "bos_policy": "never",
        "tokenizer": {"path": None, "sha256": "0" * 64, "engine": "none"},
        "seed": 0,
        "num_tokens": sum(s["num_tokens"] for s in shards),
        "num_documents": sum(s["num_documents"] for s in shards),
        "sources": {},
        "shards": shards,
    }
    (directory / "manifest.json").write_text(json.dumps(manifest, indent=1))


PHASES: tuple[PhaseSpec, ...] = (
    PhaseSpec("env", "environment", 60, ("torch",), environment),
    PhaseSpec("mfu", "MFU: zephyr vs plain reference", 230, ("torch",), mfu),
    PhaseSpec("profile", "profile (MFU under target)", 90, ("torch",), profile),
    PhaseSpec("loader", "loader feeding the step", 90, ("torch", "numpy", "fsspec"), loader),
    PhaseSpec("signatures", "MinHash signatures GPU vs CPU", 75, ("torch", "numpy", "pyarrow"), signatures),
    PhaseSpec("check", "zephyr train check + measured peak", 100, ("torch",), train_check),
    PhaseSpec("pytest", "pytest -m gpu", 120, ("torch", "pytest"), gpu_tests),
)
"""In the order they run: the headline figure first, the loader while the compile cache is warm, the checks
that only say yes or no last."""


def run_phase(spec: PhaseSpec, phase: Phase) -> int:
    """Run ``spec`` in this (child) process: exit status 0 when it finished or was skipped cleanly."""
    lacking = [m for m in spec.needs if missing(m)]
    if lacking:
        phase.save(status="skipped", reason=f"needs {', '.join(lacking)}, which this Python lacks")
        return 0
    try:
        spec.run(phase)
    except ModuleNotFoundError as exc:
        phase.save(status="skipped", reason=f"needs {exc.name}, which this Python lacks")
        return 0
    except Exception as exc:
        traceback.print_exc()
        first = (str(exc).strip().splitlines() or [""])[0][:300]
        phase.save(status="failed", reason=f"{type(exc).__name__}: {first}")
        return 1
    phase.save(status="ok")
    return 0


def sizes_for(dry_run: bool) -> Sizes:
    return DRY if dry_run else FULL


__all__ = ["PHASES", "Phase", "PhaseSpec", "Sizes", "FULL", "DRY", "run_phase", "sizes_for"]
