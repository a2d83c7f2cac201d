"""The Markdown report of ``revision_compare.py``: a header saying what was compared where, and one row per
command (best wall seconds, peak RSS, whether every output file is byte-identical and which are not)."""

from __future__ import annotations

__all__ = ["markdown", "table"]

HEADER = (
    "| command | base s | head s | head/base | base MB | head MB | outputs identical | differing files |\n"
    "|---|---|---|---|---|---|---|---|\n"
)


def _cell(side: dict, key: str, fmt: str) -> str:
    return "absent" if side.get("absent") else format(side[key], fmt)


def table(rows: list[dict]) -> str:
    """One Markdown row per command: times are the best of the repeats, MB the largest peak (10**6 bytes)."""
    lines = [HEADER]
    for row in rows:
        base, head = row["base"], row["head"]
        ratio = "" if base.get("absent") or head.get("absent") else f"{head['best_s'] / base['best_s']:.2f}"
        identical = {True: "yes", False: "**no**", None: "n/a"}[row["identical"]]
        notes = list(row["differing"])
        for name in ("base", "head"):
            if row[name].get("nondeterministic"):
                notes.append(
                    f"{name} nondeterministic across repeats: {', '.join(row[name]['nondeterministic'])}"
                )
        lines.append(
            f"| {row['command']} | {_cell(base, 'best_s', '.2f')} | {_cell(head, 'best_s', '.2f')} | {ratio} "
            f"| {_cell(base, 'peak_mb', '.0f')} | {_cell(head, 'peak_mb', '.0f')} | {identical} "
            f"| {'; '.join(f'`{n}`' for n in notes)} |\n"
        )
    return "".join(lines)


def markdown(result: dict) -> str:
    """The whole report: what ran where, the table, then the excluded commands and the ignored files."""
    rows = result["rows"]
    same = sum(1 for r in rows if r["identical"])
    files = sum(len(r["head"].get("digests", {})) for r in rows)
    lines = [
        f"### Revision comparison — {result['date']}, {result['machine']}\n\n",
        f"`{' '.join(result['argv'])}`\n\n",
        f"- base: {result['base']['label']}; head: {result['head']['label']}\n",
        f"- input: {', '.join(result['input_files'])}; flags on every command: `{' '.join(result['globals'])}`\n",
        f"- best of {result['repeat']} runs per side (interleaved); MB = peak summed RSS of the process tree; "
        f"load average (1/5/15 min) {_load(result['load'][0])} at start, {_load(result['load'][1])} at end\n",
        f"- {same} of {len(rows)} commands identical ({files} output entries at head, stdout included)\n\n",
        table(rows),
        "\nNot run (registered commands):\n\n",
        *(f"- `{name}`: {why}\n" for name, why in result["excluded"].items()),
        *(
            f"- `{name}`: **not covered** (add it to _compare_commands.COMMANDS or EXCLUDED)\n"
            for name in result["not_covered"]
        ),
        "\nCompared by presence only (their bytes legitimately differ between runs):\n\n",
        *(f"- `{i['pattern']}`: {i['why']}\n" for i in result["ignored"]),
        "\nCompared without the keys that hold times:\n\n",
        *(
            f"- `{s['pattern']}` without {', '.join(s['keys'])}: {s['why']}\n"
            for s in result.get("stripped", [])
        ),
    ]
    return "".join(lines)


def _load(values: list[float]) -> str:
    return "/".join(f"{v:.1f}" for v in values)
