"""The commands ``revision_compare.py`` runs at both revisions, the ones it leaves out and why, and the
inputs it derives once from ``--input`` so both revisions read the same bytes.

A command's arguments are plain words, placeholders (``{in}``: every data file of ``--input``; ``{run}``: the
run's folder, which is also its working directory; ``{out}``: ``{run}/out``; the names of ``make_inputs``) and
``Alt``s: flags that were renamed, of which the first one the revision's parser accepts is used. The global
execution flags (``--executor local``, ...) are added by the caller.
"""

from __future__ import annotations

import html
import json
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "Alt",
    "Command",
    "COMMANDS",
    "EXCLUDED",
    "PIPELINE",
    "REPLACE_KEYS",
    "SHARD_KEYS",
    "make_inputs",
    "resolve",
    "data_files",
]


@dataclass(frozen=True)
class Alt:
    """Renamed flags: each alternative is ``(flag, value)``; the first whose flag the revision's parser has
    (and whose value is among the flag's choices, where it has choices) is used."""

    alternatives: tuple[tuple[str, str | None], ...]
    """``(flag, None)``: a flag without a value (``--replace-columns``, once ``--overwrite``)."""


@dataclass(frozen=True)
class Command:
    name: str
    """The row's label: the registry words plus what sets this run apart (``dedup exact --mode remove``)."""
    words: str
    """The registry command (``dedup exact``)."""
    args: tuple[str | Alt, ...] = ()
    quick: bool = False
    """Part of ``--quick`` (the slow test's handful)."""
    needs: tuple[tuple[str, str, str], ...] = field(default=())
    """``(placeholder, command, file)``: this command reads ``file`` (relative to its run folder) as written by
    ``command`` at the base revision, so both revisions read the same bytes."""


COMMANDS = (
    Command("convert --to jsonl", "convert", ("{in}", "--to", "jsonl", "--output", "{out}"), quick=True),
    Command("convert (jsonl in)", "convert", ("{jsonl}", "--output", "{out}")),
    Command("sort --by url", "sort", ("{in}", "--by", "url", "--output", "{out}"), quick=True),
    Command("count", "count", ("{in}",), quick=True),
    Command("dedup exact", "dedup exact", ("{in}", "--output", "{out}")),
    Command(
        "dedup exact --mode remove",
        "dedup exact",
        ("{in}", "--mode", "remove", "--output", "{out}"),
        quick=True,
    ),
    Command("dedup fuzzy", "dedup fuzzy", ("{in}", "--output", "{out}")),
    Command("dedup fuzzy --mode remove", "dedup fuzzy", ("{in}", "--mode", "remove", "--output", "{out}")),
    Command("dedup url", "dedup url", ("{in}", "--output", "{out}")),
    Command("dedup paragraph", "dedup paragraph", ("{in}", "--output", "{out}")),
    Command("dedup substring", "dedup substring", ("{in}", "--output", "{out}")),
    Command("normalize", "normalize", ("{in}", "--output", "{out}"), quick=True),
    Command(
        "langid --languages en",
        "langid",
        (
            "{in}",
            "--languages",
            "en",
            Alt((("--replace-columns", None), ("--overwrite", None))),
            "--output",
            "{out}",
        ),
    ),
    Command("filter", "filter", ("{in}", "--output", "{out}")),
    Command("pii", "pii", ("{in}", "--output", "{out}")),
    Command(
        "decontaminate",
        "decontaminate",
        ("{in}", "--eval", "{eval}", Alt((("--mode", "remove"), ("--mode", "drop"))), "--output", "{out}"),
    ),
    Command(
        "decontaminate --mode annotate",
        "decontaminate",
        ("{in}", "--eval", "{eval}", Alt((("--mode", "annotate"), ("--mode", "flag"))), "--output", "{out}"),
    ),
    Command("quality train", "quality train", ("{labelled}", "--output", "{run}/model.bin", "--epoch", "5")),
    Command(
        "quality score",
        "quality score",
        ("{in}", "--model", "{model}", "--output", "{out}"),
        needs=(("model", "quality train", "model.bin"),),
    ),
    Command("extract", "extract", ("{warc}", "--output", "{out}")),
    Command(
        "tokenize --megatron",
        "tokenize",
        (
            "{in}",
            "--tokenizer",
            "{tokenizer}",
            Alt((("--shard-bytes", "2MB"), ("--shard-size", "2MB"))),
            "--megatron",
            "--output",
            "{out}",
        ),
    ),
    Command(
        "tokenizer train",
        "tokenizer train",
        ("{in}", "--vocab-size", "2000", "--output", "{run}/tokenizer.json"),
    ),
    Command("run (pipeline, no train stage)", "run", ("{pipeline}", "--job-dir", "{out}")),
)

EXCLUDED = {
    "train": "trains a model on token shards, reads no corpus: its checkpoints and metrics log hold tokens/s and "
    "wall times, and its timing belongs to benchmarks/train_mfu.py (tests/trainer cover its outputs)",
    "train check": "measures a model configuration (graph breaks, host syncs, FLOPs, memory), reads no corpus "
    "(tests/trainer/test_check.py)",
    "explain convert": "prints a plan without reading rows or writing files (tests/zephyr/test_physical.py)",
    "explain sort": "prints a plan without reading rows or writing files (tests/zephyr/test_physical.py)",
    "explain count": "prints a plan without reading rows or writing files (tests/zephyr/test_physical.py)",
    "explain dedup exact": "prints a plan without reading rows or writing files (tests/dedup/test_explain.py)",
    "explain dedup fuzzy": "prints a plan without reading rows or writing files (tests/dedup/test_explain.py)",
    "explain dedup url": "prints a plan without reading rows or writing files (tests/dedup/test_explain_text.py)",
    "explain dedup paragraph": "prints a plan without reading rows or writing files (tests/dedup/test_explain_text.py)",
    "explain dedup substring": "prints a plan without reading rows or writing files (tests/dedup/test_explain_text.py)",
    "explain filter": "prints a plan without reading rows or writing files (tests/pipelines/quality/test_explain_filter.py)",
    "explain tokenize": "prints a plan without reading rows or writing files (tests/tokenize/test_explain.py)",
    "explain run": "prints a plan without reading rows or writing files (tests/zephyr/test_summary.py)",
    "explain normalize": "prints a plan without reading rows or writing files (tests/zephyr/test_summary.py)",
    "explain langid": "prints a plan without reading rows or writing files (tests/zephyr/test_summary.py)",
    "explain pii": "prints a plan without reading rows or writing files (tests/zephyr/test_summary.py)",
    "explain decontaminate": "prints a plan without reading rows or writing files (tests/zephyr/test_summary.py)",
    "explain quality score": "prints a plan without reading rows or writing files (tests/zephyr/test_summary.py)",
    "explain extract": "prints a plan without reading rows or writing files (tests/zephyr/test_summary.py)",
}
"""Registered commands not run, each with the reason."""

SHARD_KEYS = ("shard_bytes", "shard_size")
"""The tokenize stage's shard-size key in a pipeline config, newest name first (renamed in f98c735); the
first one ``zephyr run --check`` accepts at a revision is used."""

REPLACE_KEYS = ("replace_columns", "overwrite")
"""The key that lets a step replace a column the data has, newest name first (``overwrite`` became
``replace_columns`` when ``--overwrite`` came to mean replacing an output folder's content)."""

PIPELINE = """version: 1
name: compare
text_column: text
id_column: id
source_column: source
lang_column: lang
steps:
  - step: read
    paths: {paths}
    num_shards: 4
  - step: normalize
  - step: langid
    languages: [en]
    min_score: 0.5
    {replace_key}: true
  - step: heuristic_filter
    rules: [gopher, c4, fineweb]
  - step: exact_dedup
  - step: fuzzy_dedup
  - step: quality
    train_from: heuristic_filter
    min_score: 0.7
  - step: tokenize
    vocab_size: 2000
    {shard_key}: 2MB
"""
"""The quickstart pipeline (pipelines/configs/quickstart.yaml) without its train stage."""


def data_files(input_dir: Path) -> list[Path]:
    """The Parquet and JSONL files of documents under ``input_dir``: a README or a script beside them is not
    data, nor is a Parquet table without a ``text`` column (the public corpus's ``dupes/`` folder holds its
    ground truth, ``truth``/``pairs``/``hard_negatives.parquet``, beside the documents)."""
    suffixes = (".parquet", ".jsonl", ".jsonl.gz", ".jsonl.zst")
    found = sorted(p for p in Path(input_dir).rglob("*") if p.is_file() and p.name.endswith(suffixes))
    return [p for p in found if p.suffix != ".parquet" or _has_text(p)]


def _has_text(path: Path) -> bool:
    import pyarrow.parquet as pq

    return "text" in pq.read_schema(path).names


def _rows(files: list[Path]) -> list[dict]:
    import pyarrow.parquet as pq

    rows: list[dict] = []
    for path in files:
        if path.suffix == ".parquet":
            rows += pq.read_table(path).to_pylist()
        elif path.suffix == ".jsonl":
            rows += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return rows


def make_inputs(files: list[Path], dest: Path) -> dict[str, str]:
    """Write the inputs some commands need beside the corpus ``files`` (``data_files`` of ``--input``, listed
    once before anything is written: an ``--out`` inside ``--input`` must not add the revisions' worktrees or
    these derived files to the corpus), all derived from it (so the same for both revisions, made once by this
    interpreter), and return placeholder → path."""
    dest.mkdir(parents=True, exist_ok=True)
    rows = [r for r in _rows(files) if isinstance(r.get("text"), str) and r["text"]]
    made = {
        "jsonl": dest / "corpus.jsonl",
        "labelled": dest / "labelled.parquet",
        "eval": dest / "eval.jsonl",
    }
    # the whole corpus as JSON lines: the JSONL reader's path through convert
    made["jsonl"].write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    # quality train: a document is "hq", its words in reverse order "lq" (no labels in a plain corpus)
    import pyarrow as pa
    import pyarrow.parquet as pq

    texts = [r["text"] for r in rows[:400]]
    pq.write_table(
        pa.table(
            {
                "id": [f"l{i:04d}" for i in range(2 * len(texts))],
                "text": texts + [" ".join(reversed(t.split())) for t in texts],
                "label": ["hq"] * len(texts) + ["lq"] * len(texts),
            }
        ),
        made["labelled"],
    )
    # decontaminate: 400 characters from the middle of every 40th document (those are contaminated)
    pieces = [t[len(t) // 2 - 200 : len(t) // 2 + 200] for t in texts[::40] if len(t) > 600]
    made["eval"].write_text("".join(json.dumps({"text": p}) + "\n" for p in pieces))
    made["tokenizer"] = _train_tokenizer([r["text"] for r in rows], dest / "tokenizer.json")
    made["warc"] = _write_warc([r["text"] for r in rows[:200]], dest / "crawl.warc.gz")
    return {name: str(path) for name, path in made.items()}


def _train_tokenizer(texts: list[str], path: Path) -> Path:
    """A byte-level BPE (2,000 tokens) on the first 4 MB of text: tokenize's input, fixed for both sides."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(
        vocab_size=2000,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    budget, sample = 4_000_000, []
    for text in texts:
        sample.append(text)
        budget -= len(text)
        if budget <= 0:
            break
    tokenizer.train_from_iterator(sample, trainer=trainer)
    tokenizer.save(str(path))
    return path


def _write_warc(texts: list[str], path: Path) -> Path:
    """The documents as HTML pages in a WARC file, with two damaged records extract must quarantine."""
    from warc_pages import BROKEN_KINDS, Page, write_warc

    pages = []
    for i, text in enumerate(texts):
        body = "\n".join(f"<p>{html.escape(p)}</p>" for p in text.split("\n") if p.strip())
        page = (
            f"<!DOCTYPE html><html><head><title>Doc {i}</title></head><body><main>{body}</main></body></html>"
        )
        pages.append(Page(f"http://example.org/doc/{i}", page))
    write_warc(str(path), pages, broken=BROKEN_KINDS[:2])
    return path


def resolve(
    command: Command, options: dict[str, list[str] | None], values: dict[str, str | list[str]]
) -> list[str]:
    """The argument list of ``command`` at a revision whose parser has ``options`` (flag → choices or None):
    placeholders filled from ``values`` (a list value becomes several arguments), ``Alt``s chosen."""
    argv: list[str] = []
    for arg in command.args:
        if isinstance(arg, Alt):
            argv += _choose(arg, options, command.name)
            continue
        value = values.get(arg[1:-1]) if arg.startswith("{") and arg.endswith("}") else None
        if isinstance(value, list):
            argv += value
        elif value is not None:
            argv.append(value)
        else:
            argv.append(arg.format(**{k: v for k, v in values.items() if isinstance(v, str)}))
    return argv


def _choose(alt: Alt, options: dict[str, list[str] | None], name: str) -> list[str]:
    for flag, value in alt.alternatives:
        if flag in options and (options[flag] is None or value in options[flag]):
            return [flag] if value is None else [flag, value]
    raise ValueError(f"{name}: this revision's parser accepts none of {alt.alternatives}")
