"""Exact substring dedup: agreement with a plain Python reference on which bytes are removed (hypothesis
over random corpora with planted repeats, in the kernels and through the engine), UTF-8 snapping, short
documents, the command line, and (slow) memory bounded by the budget."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from zephyr.dedup import substring as kernels
from zephyr.dedup.substring import SubstringConfig, substring_dedup_dataset

import zephyr
from zephyr.cli import main
from zephyr.errors import ConfigError
from zephyr.io.layout import stats_path


def reference(docs: list[bytes], min_bytes: int) -> list[bytes]:
    """Every window of ``min_bytes`` bytes that equals one at an earlier corpus position is removed; each
    removed run shrinks to whole UTF-8 characters."""
    seen: set[bytes] = set()
    out = []
    for d in docs:
        n = len(d)
        cover = [False] * n
        for s in range(n - min_bytes + 1):
            window = d[s : s + min_bytes]
            if window in seen:
                cover[s : s + min_bytes] = [True] * min_bytes
            seen.add(window)
        kept = bytearray()
        i = 0
        while i < n:
            if not cover[i]:
                kept.append(d[i])
                i += 1
                continue
            a = i
            while i < n and cover[i]:
                i += 1
            b, a2 = i, a
            while a2 < b and d[a2] & 0xC0 == 0x80:
                a2 += 1
            b2 = b
            if b < n:
                while b2 > a2 and d[b2] & 0xC0 == 0x80:
                    b2 -= 1
            kept += d[a:a2] + d[b2:b]
        out.append(bytes(kept))
    return out


def _kernel_path(docs: list[bytes], min_bytes: int, anchor: int) -> list[bytes]:
    """The three passes of substring.py with the engine's group/join replaced by plain Python."""
    data = np.frombuffer(b"".join(docs), dtype=np.uint8)
    offsets = np.cumsum([0] + [len(d) for d in docs]).astype(np.int64)
    hashes, counts = np.unique(kernels.anchor_hashes(data, offsets, min_bytes, anchor), return_counts=True)
    repeated = hashes[counts >= 2]
    wh, doc, start, is_first = kernels.candidates(data, offsets, min_bytes, anchor, repeated)
    local_docs, local_starts = doc[~is_first], start[~is_first]
    wh, doc, start = wh[is_first], doc[is_first], start[is_first]
    first: dict[int, int] = {}
    later_docs, later_starts = [], []
    for i in np.lexsort((start, doc)):
        if int(wh[i]) in first:
            later_docs.append(doc[i])
            later_starts.append(start[i])
        else:
            first[int(wh[i])] = doc[i]
    out, out_offsets, _ = kernels.cut(
        data,
        offsets,
        min_bytes,
        np.concatenate([np.array(later_docs, np.int64), local_docs]),
        np.concatenate([np.array(later_starts, np.int64), local_starts]),
    )
    return [bytes(out[out_offsets[i] : out_offsets[i + 1]]) for i in range(len(docs))]


_PIECES = st.sampled_from(["a", "b", " ", "é", "€", "𝄞", "ab", "the ", "\n"])


@st.composite
def corpora(draw):
    """Documents built from a few shared snippets (the planted repeats) and random filler."""
    snippets = draw(st.lists(st.lists(_PIECES, min_size=3, max_size=30).map("".join), min_size=1, max_size=4))
    docs = []
    for _ in range(draw(st.integers(1, 6))):
        parts = draw(
            st.lists(
                st.one_of(st.sampled_from(snippets), st.lists(_PIECES, max_size=12).map("".join)), max_size=6
            )
        )
        docs.append("".join(parts).encode())
    min_bytes = draw(st.integers(2, 16))
    anchor = draw(st.integers(1, min_bytes))
    return docs, min_bytes, anchor


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(corpora())
def test_kernels_agree_with_the_reference(case):
    docs, min_bytes, anchor = case
    assert _kernel_path(docs, min_bytes, anchor) == reference(docs, min_bytes)


@pytest.mark.parametrize("in_memory", [None, 0], ids=["broadcast", "join"])
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=corpora())
def test_engine_agrees_with_the_reference(tmp_path_factory, case, in_memory):
    docs, min_bytes, anchor = case
    scratch = str(tmp_path_factory.mktemp("substring"))
    rows = [{"id": i, "text": d.decode()} for i, d in enumerate(docs)]
    ds = zephyr.from_items(rows, num_shards=min(3, len(rows)))
    config = SubstringConfig(min_bytes=min_bytes, anchor_bytes=anchor)
    out = substring_dedup_dataset(
        ds, config, execution={"executor": "inprocess"}, scratch=scratch, shared_window_rows=in_memory
    )
    got = out.to_arrow(executor="inprocess")
    assert got["id"].to_pylist() == list(range(len(docs)))  # input order kept
    assert [t.encode() for t in got["text"].to_pylist()] == reference(docs, min_bytes)


def test_repeat_inside_one_document_and_utf8_snapping():
    text = "€€€€ xyz €€€€".encode()  # "€€" (6 bytes) repeats inside the first run already
    assert reference([text], 6) == ["€ xyz ".encode()]
    assert _kernel_path([text], 6, 3) == reference([text], 6)
    # "€" is e2 82 ac and "Ⴌ" e1 82 ac: the repeated bytes "82 ac b c d" start inside a character, which stays
    docs = ["€bcdz".encode(), "Ⴌbcdy".encode()]
    assert reference(docs, 5) == ["€bcdz".encode(), "Ⴌy".encode()]
    assert _kernel_path(docs, 5, 2) == reference(docs, 5)


def test_null_empty_and_short_documents(tmp_path):
    rows = [
        {"id": 1, "text": "shared boilerplate text here! unique one"},
        {"id": 2, "text": None},
        {"id": 3, "text": ""},
        {"id": 4, "text": "shared boilerplate text here!"},  # loses everything: dropped with min_doc_bytes
        {"id": 5, "text": "x shared boilerplate text here! and a long tail that stays"},
    ]
    config = SubstringConfig(min_bytes=10, min_doc_bytes=5)
    out = substring_dedup_dataset(
        zephyr.from_items(rows), config, execution={"executor": "inprocess"}, scratch=str(tmp_path)
    )
    result = out.write_parquet(str(tmp_path / "out"), executor="inprocess")
    table = pq.read_table(tmp_path / "out")
    assert table.to_pylist() == [
        {"id": 1, "text": "shared boilerplate text here! unique one"},
        {"id": 2, "text": None},
        {"id": 3, "text": ""},
        {"id": 5, "text": "x and a long tail that stays"},
    ]
    cut = result.stats["stages"][-1]["ops"][-1]
    assert cut["dropped_by_reason"] == {"substring_short_doc": 1}


def test_the_in_memory_window_limit_is_the_budgets_share(tmp_path, monkeypatch):
    """Without ``shared_window_rows`` the broadcast path holds up to ``Budget.shared_window_rows`` windows."""
    import zephyr.budget as budget

    rows = [{"id": i, "text": f"shared boilerplate text here! number {i}"} for i in range(4)]
    config = SubstringConfig(min_bytes=10)
    execution = {"executor": "inprocess", "memory_budget": "64MiB"}
    assert budget.Budget(64 << 20).shared_window_rows == (64 << 20) // 4 // budget.SHARED_WINDOW_BYTES
    stats: dict = {}
    substring_dedup_dataset(
        zephyr.from_items(rows), config, execution=execution, scratch=str(tmp_path / "a"), stats=stats
    )
    assert stats["shared_windows"] > 0 and stats["broadcast"]
    monkeypatch.setattr(budget, "SHARED_WINDOW_BYTES", 64 << 20)  # the share holds no window: join path
    stats = {}
    substring_dedup_dataset(
        zephyr.from_items(rows), config, execution=execution, scratch=str(tmp_path / "b"), stats=stats
    )
    assert not stats["broadcast"] and stats["repeat_windows"] > 0


def test_empty_input(tmp_path):
    ds = zephyr.from_arrow(pa.table({"id": pa.array([], pa.int64()), "text": pa.array([], pa.string())}))
    out = substring_dedup_dataset(
        ds, SubstringConfig(), execution={"executor": "inprocess"}, scratch=str(tmp_path)
    )
    assert out.count(executor="inprocess") == 0


def test_config_checks():
    with pytest.raises(ConfigError, match="anchor_bytes"):
        SubstringConfig(min_bytes=10, anchor_bytes=11)
    with pytest.raises(ConfigError, match="min_bytes"):
        SubstringConfig(min_bytes=1)


def _boilerplate_corpus(docs: int, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    footer = "Copyright 2024 Example Ltd. All rights reserved. Terms of use | Privacy policy | Contact us. "
    words = [
        "alpha",
        "beta",
        "gamma",
        "delta",
        "epsilon",
        "zeta",
        "eta",
        "theta",
        "iota",
        "kappa",
        "lambda",
        "mu",
    ]
    rows = []
    for i in range(docs):
        body = " ".join(rng.choice(words) for _ in range(rng.randint(20, 200)))
        rows.append({"id": i, "source": f"site{i % 3}", "text": f"{body} {footer}" if i % 2 else body})
    return rows


def test_command_reports_bytes_per_source_and_top_spans(tmp_path):
    rows = _boilerplate_corpus(60)
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "in.parquet")
    out = tmp_path / "out"
    assert (
        main(
            [
                "dedup",
                "substring",
                str(tmp_path / "in.parquet"),
                "--output",
                str(out),
                "--min-bytes",
                "50",
                "--executor",
                "inprocess",
            ]
        )
        == 0
    )
    stats = json.loads(Path(stats_path(out)).read_text())["dedup"]
    expected = reference([r["text"].encode() for r in rows], 50)
    removed = sum(len(r["text"].encode()) for r in rows) - sum(len(t) for t in expected)
    assert stats["bytes_removed"] == removed > 0
    assert sum(stats["bytes_removed_per_source"].values()) == removed
    top = stats["top_spans"][0]
    assert "All rights reserved" in top["text"] and top["documents"] == 30
    kept = pq.read_table(out)
    assert [t.encode() for t in kept["text"].to_pylist()] == expected


@pytest.mark.slow
def test_memory_stays_within_the_budget(tmp_path):
    """~48 MB of text (a third of it repeated boilerplate) under a 64 MB budget: the process's peak RSS
    grows by less than 6x the budget above the same command on two documents (interpreter, pyarrow, numba)."""
    rng = random.Random(1)
    words = [f"w{i}" for i in range(5000)]
    footer = " ".join(rng.choice(words) for _ in range(400))
    texts = [
        " ".join(rng.choice(words) for _ in range(rng.randint(200, 2000))) + (footer if i % 3 == 0 else "")
        for i in range(12000)
    ]
    pq.write_table(
        pa.table({"id": list(range(len(texts))), "text": texts}), tmp_path / "in.parquet", row_group_size=1000
    )
    pq.write_table(pa.table({"id": [0, 1], "text": [footer, footer]}), tmp_path / "tiny.parquet")
    code = (
        "import resource, sys; from zephyr.cli import main; "
        "rc = main(sys.argv[1:]); print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss); sys.exit(rc)"
    )

    def peak_kib(name: str) -> int:
        args = [
            "dedup",
            "substring",
            str(tmp_path / name),
            "--output",
            str(tmp_path / f"out-{name}"),
            "--memory-budget",
            "64MB",
            "--workers",
            "2",
        ]
        proc = subprocess.run(
            [sys.executable, "-c", code, *args],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONWARNINGS": "ignore"},
        )
        assert proc.returncode == 0, proc.stderr
        return int(proc.stdout.split()[-1])

    base, peak = peak_kib("tiny.parquet"), peak_kib("in.parquet")
    assert (peak - base) * 1024 < 6 * 64 * 2**20, (peak, base)


def test_unit_tokens_snaps_to_token_starts(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(
        ["alpha beta gamma delta zeta"], trainers.WordLevelTrainer(special_tokens=["[UNK]"])
    )
    tok.save(str(tmp_path / "tokenizer.json"))
    pq.write_table(
        pa.table({"id": [1, 2], "text": ["alpha beta gamma delta", "zeta beta gamma delta"]}),
        tmp_path / "in.parquet",
    )
    common = ["--min-bytes", "8", "--executor", "inprocess"]
    assert (
        main(["dedup", "substring", str(tmp_path / "in.parquet"), "--output", str(tmp_path / "b"), *common])
        == 0
    )
    assert pq.read_table(tmp_path / "b")["text"].to_pylist()[1] == "zet"  # "a beta gamma delta" is in doc 1
    assert (
        main(
            [
                "dedup",
                "substring",
                str(tmp_path / "in.parquet"),
                "--output",
                str(tmp_path / "t"),
                *common,
                "--unit",
                "tokens",
                "--tokenizer",
                str(tmp_path / "tokenizer.json"),
            ]
        )
        == 0
    )
    assert (
        pq.read_table(tmp_path / "t")["text"].to_pylist()[1] == "zeta "
    )  # the run starts at the token "beta"
    assert (
        main(
            [
                "dedup",
                "substring",
                str(tmp_path / "in.parquet"),
                "--output",
                str(tmp_path / "x"),
                "--unit",
                "tokens",
            ]
        )
        == 1
    )


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--mode", "annotate"], "has no --mode annotate"),
        (["--replace-columns"], "--replace-columns and --output-column do not apply"),
        (["--output-column", "seen"], "--replace-columns and --output-column do not apply"),
    ],
)
@pytest.mark.parametrize("command", [["dedup", "substring"], ["explain", "dedup", "substring"]])
def test_flags_that_would_be_ignored_are_refused(tmp_path, capsys, command, flags, message):
    """The shared dedup flags that choose or name added columns mean nothing to substring dedup (it cuts spans out
    of the text): one line that says so, before any work, where they used to be ignored."""
    pq.write_table(pa.table({"id": [1, 2], "text": ["alpha beta", "beta gamma"]}), tmp_path / "in.parquet")
    out = ["--output", str(tmp_path / "out")] if command[0] == "dedup" else []
    argv = [*command, str(tmp_path / "in.parquet"), *out, "--executor", "inprocess", *flags]
    assert main(argv) == 1  # a configuration error: one line, no traceback
    assert message in capsys.readouterr().err
    assert not list(tmp_path.glob("out/**/*.parquet"))  # nothing written
    assert (
        main([*command, str(tmp_path / "in.parquet"), *out, "--executor", "inprocess", "--mode", "remove"])
        == 0
    )


def test_the_python_kernels_hash_without_overflow_warnings():
    """Without numba (``ZEPHYR_NO_NUMBA=1``) the kernels run as Python on numpy scalars: their uint64 hashing
    wraps on purpose, as numba's does, and must not warn (an overflow warning is an error under pytest)."""
    import os
    import subprocess
    import sys

    code = (
        "import numpy as np\n"
        "from zephyr.dedup import substring as k\n"
        "data = np.frombuffer(b'the same long sentence here. ' * 8 + b'x' * 40, dtype=np.uint8)\n"
        "offsets = np.array([0, 232, len(data)], dtype=np.int64)\n"
        "anchors = k.anchor_hashes(data, offsets, 50, 16)\n"
        "repeated = np.unique(anchors)\n"
        "h, docs, starts, first = k.candidates(data, offsets, 50, 16, repeated)\n"
        "print(len(k.cut(data, offsets, 50, docs[~first], starts[~first])[0]))\n"
    )
    env = {**os.environ, "ZEPHYR_NO_NUMBA": "1"}
    out = subprocess.run(
        [sys.executable, "-W", "error", "-c", code], capture_output=True, text=True, env=env, check=False
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["69"]  # doc 0 keeps its first sentence (29 bytes), doc 1 its 40


def test_an_interrupted_pipeline_step_resumes_its_finished_passes(tmp_path, monkeypatch):
    """The ``substring_dedup`` step's passes write under its work dir (``passes/substring``), which a failed
    run leaves behind: the rerun resumes them (no candidate window is computed again) and removes the
    repeats."""
    import yaml

    rows = _boilerplate_corpus(40)
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "in.parquet")
    steps = [{"step": "read", "paths": [str(tmp_path / "in.parquet")], "num_shards": 4}]
    steps.append({"step": "substring_dedup", "min_bytes": 50})
    (tmp_path / "p.yaml").write_text(yaml.safe_dump({"name": "substring", "steps": steps}))
    job = tmp_path / "job"
    argv = ["run", str(tmp_path / "p.yaml"), "--job-dir", str(job), "--executor", "inprocess", "--no-report"]

    def interrupted(self, table):
        raise KeyboardInterrupt("stopped in the output pass")

    with monkeypatch.context() as patch:
        patch.setattr(kernels._Cut, "__call__", interrupted)
        assert main(argv) != 0  # "interrupted; rerun the same command to resume"
    assert list(job.glob("01-*.zephyr/work/passes/substring/candidates/*.parquet"))
    computed = []
    windows = kernels._batch_candidates
    monkeypatch.setattr(kernels, "_batch_candidates", lambda *a: computed.append(1) or windows(*a))
    assert main(argv) == 0
    assert computed == []  # pass 2 resumed from the failed run's files
    assert not list(job.glob("01-*.zephyr/work/passes/substring"))
    got = pq.read_table(job / "01-substring_dedup")  # in corpus order: the read step's shards
    expected = reference([rows[i]["text"].encode() for i in got["id"].to_pylist()], 50)
    assert [t.encode() for t in got["text"].to_pylist()] == expected
