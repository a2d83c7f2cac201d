"""Every shell and Python example in README.md and docs/*.md runs as written, on the sample corpus.

What runs
    Each fenced block labelled ``bash``, ``sh``, ``console`` or ``python`` in README.md and docs/*.md is one
    test, named ``PAGE:LINE`` (the line of its opening fence). A ``python`` block runs as a script file in a
    fresh interpreter (``python example.py``, as a reader runs it); a ``bash`` or ``sh`` block runs under
    ``bash -euo pipefail``, and a ``console`` block runs its ``$ `` lines that way (the other lines are the
    output shown, not compared). Each block runs in a folder of its own with the worktree's ``.venv/bin``
    first on PATH; it passes when it exits 0. A ``pip install`` line is not run: the worktree's ``.venv`` is
    the installed environment (every extra included), and ``.`` is not the repository there.

The folder a block runs in
    holds the names the docs use, linked in when the block, or a file it reads, names them other than as its
    output (``FIXTURES``). Each is built once per session, from every fourth document of the embedded sample
    (data/sample/): ``corpus/*.parquet`` and ``corpus/docs/``, the corpora ``a/``, ``b/``, ``in/`` and
    ``crawl-2026-1N/``, a ``tokenizer.json`` trained by ``zephyr tokenizer train`` (also standing in for
    ``models/gpt2/tokenizer.json``, which a reader downloads), the token shards ``shards/``, ``web/`` and
    ``code/`` written by ``zephyr tokenize``, WARC files ``crawl/*.warc.gz``; and the repository's ``data/``,
    ``pipelines/``, ``scripts/``, ``benchmarks/`` and ``.venv/``. A block of another language whose first line
    is a comment naming a file (``# run.yaml``) is that file: it is written into the folder of each block of
    its page that names it, and is not a test itself.

Markers
    A block that does not simply run carries an HTML comment (invisible when rendered) on the line right above
    its fence, one marker per line:

    ``<!-- docs-test: skip: REASON -->``
        it cannot run here: S3, a GPU, a remote cluster, a download, a long training run. REASON is required.
    ``<!-- docs-test: excerpt -->``
        it is not a program: a synopsis (``[--flag]``, ``IN...``) or a fragment (``zephyr train ...``).
    ``<!-- docs-test: xfail: REASON -->``
        it runs and fails today; REASON names the bug. Strict: the test fails once the bug is fixed, so the
        marker goes with the fix.
    ``<!-- docs-test: slow -->``
        it takes more than ~20 s here: it runs with ``-m slow`` only.

    ``test_markers_are_well_formed`` checks that every marker is one of these, sits above a block and has its
    reason.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PAGES = ["README.md", *sorted(p.relative_to(REPO).as_posix() for p in (REPO / "docs").glob("*.md"))]
VENV_BIN = Path(sys.executable).parent
RUN_LANGS = {"bash": "shell", "sh": "shell", "console": "console", "python": "python"}
MARKERS = {"skip": True, "xfail": True, "excerpt": False, "slow": False}  # marker -> needs a reason
DEFAULT_TIMEOUT_S = 240
SLOW_TIMEOUT_S = 1500

FENCE_OPEN = re.compile(r"^(\s*)```([\w+-]*)\s*$")  # indented too: a block inside a list item
MARKER_LINE = re.compile(r"^\s*<!--\s*docs-test:\s*([\w-]+)\s*(?::\s*(.*?))?\s*-->\s*$")
PIP_INSTALL = re.compile(r"^(\s*)(pip install .*)$", re.M)
FILE_HEADER = re.compile(r"^#\s*([\w.-]+\.(?:ya?ml|json|txt))\s*$")


class ExampleFailed(AssertionError):
    """An example exited non-zero: what an xfail expects (a timeout is not that)."""


@dataclass(frozen=True)
class Block:
    page: str
    line: int  # 1-based line of the opening fence
    lang: str
    text: str
    markers: tuple[tuple[str, str], ...] = field(default=())

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"

    def marker(self, name: str) -> str | None:
        return next((reason for word, reason in self.markers if word == name), None)

    def has(self, name: str) -> bool:
        return any(word == name for word, _ in self.markers)


def _blocks(page: str) -> list[Block]:
    """Every fenced block of a page with the markers right above it."""
    lines = (REPO / page).read_text().split("\n")
    blocks, i = [], 0
    while i < len(lines):
        opening = FENCE_OPEN.match(lines[i])
        if not opening:
            i += 1
            continue
        indent = opening.group(1)
        end = next((j for j in range(i + 1, len(lines)) if lines[j].rstrip() == f"{indent}```"), None)
        if end is None:
            raise AssertionError(f"{page}:{i + 1}: a code fence that is never closed")
        markers, k = [], i - 1
        while k >= 0 and (m := MARKER_LINE.match(lines[k])):
            markers.insert(0, (m.group(1), m.group(2) or ""))
            k -= 1
        body = "".join(line.removeprefix(indent) + "\n" for line in lines[i + 1 : end])
        blocks.append(Block(page, i + 1, opening.group(2), body, tuple(markers)))
        i = end + 1
    return blocks


ALL_BLOCKS = {page: _blocks(page) for page in PAGES}


def _file_blocks(page: str) -> dict[str, str]:
    """The files a page defines: blocks (not run themselves) whose first line is ``# NAME``."""
    files = {}
    for block in ALL_BLOCKS[page]:
        header = FILE_HEADER.match(block.text.split("\n", 1)[0])
        if block.lang not in RUN_LANGS and header:
            files[header.group(1)] = block.text
    return files


def _marks(block: Block) -> list[pytest.MarkDecorator]:
    if block.has("skip"):
        return [pytest.mark.skip(reason=f"docs-test skip: {block.marker('skip')}")]
    if block.has("excerpt"):
        return [pytest.mark.skip(reason="docs-test excerpt: not a complete program")]
    marks = []
    if block.has("slow"):
        marks += [pytest.mark.slow, pytest.mark.timeout(SLOW_TIMEOUT_S + 60)]
    if block.has("xfail"):
        marks.append(pytest.mark.xfail(raises=ExampleFailed, strict=True, reason=block.marker("xfail")))
    return marks


RUNNABLE = [
    pytest.param(block, id=block.id, marks=_marks(block))
    for page in PAGES
    for block in ALL_BLOCKS[page]
    if block.lang in RUN_LANGS
]


# ------------------------------------------------------------------------------------------------------------
# The names the docs use, built once per session.


def _sample_slice():
    """Every fourth document of the sample (380 documents, 2.2 MB of text): every source, small enough to
    keep each example's run short."""
    import pyarrow.parquet as pq

    table = pq.read_table(REPO / "data" / "sample" / "sample.parquet")
    return table.take(list(range(0, table.num_rows, 4)))


def _write_parts(folder: Path, table, parts: int) -> None:
    import pyarrow.parquet as pq

    folder.mkdir(parents=True)
    step = -(-table.num_rows // parts)
    for n in range(parts):
        pq.write_table(table.slice(n * step, step), folder / f"part-{n:05d}.parquet")


def _zephyr(cache: Path, *args: str) -> None:
    try:
        _run_checked([str(VENV_BIN / "zephyr"), *args, "--workers", "2"], cache, "building a fixture")
    except ExampleFailed as exc:  # a broken fixture is an error of every test using it, never an xfail
        raise RuntimeError(str(exc)) from None


class Fixtures:
    """Builds each name once, in a session folder, on first use; ``link`` puts it into a block's folder."""

    def __init__(self, root: Path):
        self.root = root

    def path(self, name: str) -> Path:
        target = self.root / name.rstrip("/")
        if not target.exists():
            FIXTURES[name](self)
        return target

    def link(self, name: str, folder: Path) -> None:
        source, target = self.path(name), folder / name.rstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.exists():
            return
        if source.is_symlink():  # the repository's own folders: read, never written by an example
            target.symlink_to(source.resolve())
        elif (
            source.is_dir()
        ):  # hard links: an example that rewrites a file replaces it, never changes the cache
            shutil.copytree(source, target, copy_function=os.link)
        else:
            os.link(source, target)


def _corpus(fx: Fixtures) -> None:
    """``corpus/*.parquet`` (README) and the same files in ``corpus/docs/`` (docs/tokenize.md)."""
    corpus = fx.root / "corpus"
    _write_parts(corpus / "docs", _sample_slice(), 2)
    for part in (corpus / "docs").glob("*.parquet"):
        os.link(part, corpus / part.name)


def _split(name: str, index: int, of: int) -> Callable[[Fixtures], None]:
    def build(fx: Fixtures) -> None:
        table = _sample_slice()
        step = -(-table.num_rows // of)
        _write_parts(fx.root / name, table.slice(index * step, step), 1)

    return build


def _tokenizer(fx: Fixtures) -> None:
    corpus = fx.path("corpus/")
    _zephyr(
        fx.root,
        "tokenizer",
        "train",
        str(corpus / "docs"),
        "--vocab-size",
        "2048",
        "--output",
        "tokenizer.json",
    )


def _gpt2_stand_in(fx: Fixtures) -> None:
    (fx.root / "models" / "gpt2").mkdir(parents=True)
    shutil.copy(fx.path("tokenizer.json"), fx.root / "models" / "gpt2" / "tokenizer.json")


def _token_set(name: str, source: str, under: str = "") -> Callable[[Fixtures], None]:
    def build(fx: Fixtures) -> None:
        inputs = fx.path(source) / under
        tokenizer = fx.path("tokenizer.json")
        _zephyr(fx.root, "tokenize", str(inputs), "--tokenizer", str(tokenizer), "--output", name)

    return build


def _warcs(fx: Fixtures) -> None:
    sys.path.insert(0, str(REPO / "benchmarks"))  # warc_pages: test WARCs
    from warc_pages import sample_pages, write_warc

    (fx.root / "crawl").mkdir()
    for n in range(2):  # + short pages the heuristic filter drops (zephyr run web trains on both verdicts)
        short = [
            dataclasses.replace(p, url=p.url.replace("/page/", "/short/"))
            for p in sample_pages(6, seed=10 + n, paragraphs=1, words=25)
        ]
        write_warc(str(fx.root / "crawl" / f"part-{n}.warc.gz"), sample_pages(20, seed=n) + short)


def _repo_link(name: str) -> Callable[[Fixtures], None]:
    def build(fx: Fixtures) -> None:
        (fx.root / name).symlink_to(REPO / name)

    return build


FIXTURES: dict[str, Callable[[Fixtures], None]] = {
    "corpus/": _corpus,
    "a/": _split("a", 0, 2),
    "b/": _split("b", 1, 2),
    "in/": _split("in", 0, 1),
    "crawl-2026-10/": _split("crawl-2026-10", 0, 3),
    "crawl-2026-11/": _split("crawl-2026-11", 1, 3),
    "crawl-2026-12/": _split("crawl-2026-12", 2, 3),
    "tokenizer.json": _tokenizer,
    "models/gpt2/": _gpt2_stand_in,
    "shards/": _token_set("shards", "corpus/", "docs"),
    "web/": _token_set("web", "a/"),
    "code/": _token_set("code", "b/"),
    "crawl/": _warcs,
    **{f"{name}/": _repo_link(name) for name in ["data", "pipelines", "scripts", "benchmarks", ".venv"]},
}


OUTPUT_BEFORE = re.compile(r"(?:--output[ =]|output=[\"'])$")


def _names_in(text: str) -> list[str]:
    """The fixture names a text reads: each as a path of its own (not the tail of another path), and not only
    where it is the output (``--output shards/``, ``output="shards/"``: the example makes it)."""
    names = []
    for name in FIXTURES:
        starts = [m.start() for m in re.finditer(r"(?<![\w./-])" + re.escape(name), text)]
        if any(not OUTPUT_BEFORE.search(text[:start]) for start in starts):
            names.append(name)
    return names


@pytest.fixture(scope="session")
def fixtures(tmp_path_factory) -> Fixtures:
    return Fixtures(tmp_path_factory.mktemp("docs-fixtures"))


# ------------------------------------------------------------------------------------------------------------
# Running a block.


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
    env["VIRTUAL_ENV"] = str(VENV_BIN.parent)
    env.pop("PYTHONPATH", None)
    return env


def _run_checked(argv: list[str], cwd: Path, what: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
    """Run ``argv`` in its own process group (a timeout ends the whole group); fail with its output's tail."""
    proc = subprocess.Popen(
        argv,
        cwd=cwd,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"{what}: still running after {timeout_s} s; stderr ends:\n{err[-3000:]}")
    if proc.returncode != 0:
        raise ExampleFailed(
            f"{what}: exit {proc.returncode}\nstdout ends:\n{out[-2000:]}\nstderr ends:\n{err[-4000:]}"
        )


def _console_commands(text: str) -> str:
    """The ``$ `` lines of a console block, with their continuation lines."""
    commands, continued = [], False
    for line in text.split("\n"):
        if line.startswith("$ ") or continued:
            commands.append(line[2:] if line.startswith("$ ") and not continued else line)
            continued = line.endswith("\\")
    return "\n".join(commands) + "\n"


@pytest.mark.parametrize("block", RUNNABLE)
def test_example_runs(block: Block, fixtures: Fixtures, tmp_path: Path):
    folder = tmp_path / "example"
    folder.mkdir()
    files = {name: text for name, text in _file_blocks(block.page).items() if name in block.text}
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    for name in _names_in(block.text + "".join(files.values())):
        fixtures.link(name, folder)
    kind = RUN_LANGS[block.lang]
    if kind == "python":
        (folder / "example.py").write_text(block.text)
        argv = [str(VENV_BIN / "python"), "example.py"]
    else:
        script = _console_commands(block.text) if kind == "console" else block.text
        (folder / "example.sh").write_text(PIP_INSTALL.sub(r"\1: not run here: \2", script))
        argv = ["bash", "-euo", "pipefail", "example.sh"]
    timeout_s = SLOW_TIMEOUT_S if block.has("slow") else DEFAULT_TIMEOUT_S
    _run_checked(argv, folder, block.id, timeout_s)


def test_markers_are_well_formed():
    """Every ``docs-test:`` comment is a known marker, sits right above a block (or another marker that does)
    and carries the reason its kind needs; a block is not both skipped and run."""
    problems = []
    for page in PAGES:
        lines = (REPO / page).read_text().split("\n")
        for i, line in enumerate(lines):
            if "docs-test" not in line:
                continue
            where = f"{page}:{i + 1}"
            m = MARKER_LINE.match(line)
            if not m:
                problems.append(f"{where}: not a marker line: {line.strip()}")
                continue
            word, reason = m.group(1), (m.group(2) or "").strip()
            if word not in MARKERS:
                problems.append(f"{where}: unknown marker {word!r}; known: {', '.join(MARKERS)}")
            elif MARKERS[word] and not reason:
                problems.append(f"{where}: `{word}` needs a reason (<!-- docs-test: {word}: REASON -->)")
            k = i + 1
            while k < len(lines) and MARKER_LINE.match(lines[k]):
                k += 1
            if k >= len(lines) or not FENCE_OPEN.match(lines[k]):
                problems.append(f"{where}: a marker must sit right above a code fence")
        for block in ALL_BLOCKS[page]:
            if block.markers and block.lang not in RUN_LANGS:
                problems.append(f"{block.id}: a marker on a {block.lang or 'plain'} block, which never runs")
            if (block.has("skip") or block.has("excerpt")) and (block.has("xfail") or block.has("slow")):
                problems.append(f"{block.id}: skip/excerpt with xfail/slow: a block that never runs")
    assert not problems, "\n".join(problems)
