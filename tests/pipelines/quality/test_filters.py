"""Heuristic rules on hand-made edge cases; every reason names the failing condition."""

from types import SimpleNamespace

import pyarrow as pa
import pytest
from zephyr.pipelines.quality.filters import NULL_TEXT, FilterAnnotator, build_rule_families
from zephyr.pipelines.quality.rules import FineWebQuality, GopherRepetition

from zephyr import counters
from zephyr.errors import ConfigError
from zephyr.removal import DROP_REASON, Route

GOOD_EN = (
    "The history of the city is long and it is closely tied to the river that runs through it.\n"
    "Merchants came to trade with the people of the valley, and they brought new ideas with them.\n"
    "Over the centuries the town grew into a busy market, and many of the old buildings still stand today.\n"
    "Visitors who walk along the water can see the bridges, the churches and the houses of the traders.\n"
    "Local historians have written that the growth of the port was the key to the success of the region."
)
GOOD_RU = (
    "История города длинная, и она тесно связана с рекой, которая течёт через него. Купцы приходили "
    "торговать с жителями долины, и они приносили с собой новые идеи. За много веков город вырос в большой "
    "рынок, и многие старые здания всё ещё стоят. Гости, которые гуляют вдоль воды, видят мосты, церкви и "
    "дома купцов. Местные историки пишут, что рост порта был ключом к успеху всего края, и это так."
)
GOOD_ZH = "这座城市的历史很长，与流经它的河流密切相关。商人们来到山谷与人们进行贸易，并带来了新的思想。" * 3

EDGE = {
    "empty": "",
    "whitespace": "   \n\t\n  ",
    "punctuation": "!!! ... ??? ;;; --- ***",
    "long_word": "a" * 1000,
}


def _filter(table, rules, overrides=None, text_column="text"):
    """The rules' verdict on ``table`` by the batch ops every filter runs: ``FilterAnnotator`` (each row's
    first failing rule, its counters), then the routes of ``zephyr.removal.Route``."""
    with counters.collecting() as seen:
        annotated = FilterAnnotator(rules, overrides or {}, text_column)(table)
    kept, dropped, quarantined = (
        Route(side, DROP_REASON, quarantine=(NULL_TEXT,))(annotated)
        for side in ("kept", "dropped", "quarantined")
    )
    assert table.num_rows == kept.kept.num_rows + dropped.num_rows + quarantined.num_rows
    dropped_rows = {k: v for k, v in kept.dropped.items() if k != "null_text"}
    return SimpleNamespace(
        kept=kept.kept, dropped=dropped, quarantined=quarantined, dropped_rows=dropped_rows, counters=seen
    )


def _run(texts, rules, langs=None):
    cols = {"text": texts}
    if langs is not None:
        cols["lang"] = langs
    return _filter(pa.table(cols), rules)


def _reasons(result):
    return dict(zip(result.dropped["text"].to_pylist(), result.dropped["drop_reason"].to_pylist()))


@pytest.mark.parametrize("rules", ["gopher", "c4", "fineweb", "gopher,c4,fineweb"])
def test_edge_cases_are_dropped_with_reasons_and_nulls_quarantined(rules):
    texts = [*EDGE.values(), None, GOOD_EN]
    r = _run(texts, rules)
    assert r.quarantined.num_rows == 1
    assert r.quarantined["quarantine_reason"].to_pylist() == ["null_text"]
    assert r.kept["text"].to_pylist() == [GOOD_EN]
    reasons = _reasons(r)
    assert set(reasons) == set(EDGE.values())
    assert sum(r.dropped_rows.values()) == 4
    for reason in reasons.values():
        assert "enough" not in reason and reason.split("_")[0] in ("gopher", "c4", "fineweb")


def test_gopher_reasons_name_the_failure():
    r = _run(
        [EDGE["empty"], EDGE["long_word"], "ab " * 60, "# " + "tag #x " * 40 + GOOD_EN], "gopher_quality"
    )
    reasons = list(_reasons(r).values())
    assert reasons == [
        "gopher_too_few_words",
        "gopher_too_few_words",
        "gopher_mean_word_too_short",
        "gopher_too_many_hashes",
    ]
    long_words = " ".join(["a" * 1000] + ["abcdefghijklmnop"] * 60)
    assert _reasons(_run([long_words], "gopher_quality"))[long_words] == "gopher_mean_word_too_long"
    no_stop = " ".join(["alpha beta gamma delta epsilon"] * 15)
    assert _reasons(_run([no_stop], "gopher_quality"))[no_stop] == "gopher_too_few_stop_words"
    bullets = "\n".join(f"- item number {i} of the list with the words" for i in range(60))
    assert _reasons(_run([bullets], "gopher_quality"))[bullets] == "gopher_too_many_bullet_lines"


def test_non_latin_scripts_use_their_language():
    r = _run([GOOD_RU, GOOD_ZH], "gopher_quality", langs=["ru", "zh"])
    assert r.kept.num_rows == 2, _reasons(r)
    # as English: Russian has none of the English stop words, Chinese has no spaces
    r_en = _run([GOOD_RU, GOOD_ZH], "gopher_quality")
    assert list(_reasons(r_en).values()) == ["gopher_too_few_stop_words", "gopher_too_few_words"]


def test_gopher_repetition_rules():
    lines = "\n".join(["the same line of text is here again"] * 10 + ["one different line"])
    ngram = " ".join(["the cat sat on the mat"] * 20)
    r = _run([lines, ngram, GOOD_EN], "gopher_repetition")
    reasons = _reasons(r)
    assert reasons[lines] == "gopher_too_many_duplicate_lines"
    assert reasons[ngram].startswith("gopher_top_2gram") or reasons[ngram].startswith(
        "gopher_too_many_duplicate"
    )
    assert r.kept["text"].to_pylist() == [GOOD_EN]


def test_c4_page_rules_and_line_cleaning():
    lorem = GOOD_EN + "\nLorem ipsum dolor sit amet, consectetur adipiscing elit."
    curly = GOOD_EN + "\nThe function body is { return x; } in this example code."
    bad = GOOD_EN.replace("busy market", "porn market")
    cleaned = (
        "Menu\nPlease enable JavaScript in your browser to see this page.\n" + GOOD_EN + "[1]\nHome | About"
    )
    r = _run([lorem, curly, bad, cleaned], "c4")
    reasons = _reasons(r)
    assert reasons[lorem] == "c4_lorem_ipsum"
    assert reasons[curly] == "c4_curly_bracket"
    assert reasons[bad] == "c4_bad_words"
    assert r.kept["text"].to_pylist() == [GOOD_EN]  # nav, javascript line and citation removed
    assert r.counters["c4_lines_removed"] >= 3
    assert (
        _reasons(_run(["One sentence only. Two."], "c4"))["One sentence only. Two."] == "c4_too_few_sentences"
    )


def test_c4_without_line_cleaning_keeps_text():
    text = "Menu\n" + GOOD_EN
    r = _filter(pa.table({"text": [text]}), "c4", {"c4": {"clean_lines": False}})
    assert r.kept["text"].to_pylist() == [text]


def test_fineweb_rules():
    short = "\n".join(f"Item {i}." for i in range(20))
    unpunct = "\n".join(
        ["a long line of text without any ending mark at all here"] * 1
        + [f"line {i} with more words and no stop" for i in range(9)]
    )
    dup = GOOD_EN + "\n" + "\n".join(["This exact sentence is repeated many times in the page."] * 4)
    r = _run([short, unpunct, dup], "fineweb")
    reasons = _reasons(r)
    assert reasons[unpunct] == "fineweb_too_few_punctuated_lines"
    assert reasons[dup] == "fineweb_too_many_duplicate_line_chars"
    assert reasons[short] == "fineweb_too_many_short_lines"


def test_thresholds_are_config():
    strict = {"gopher_quality": {"min_words": 1000}}
    assert _filter(pa.table({"text": [GOOD_EN]}), "gopher_quality", strict).dropped_rows == {
        "gopher_too_few_words": 1
    }
    off = {
        "gopher_quality": dict.fromkeys(
            ("min_words", "min_stop_words", "min_alpha_word_ratio", "min_mean_word_length")
        )
    }
    assert _filter(pa.table({"text": ["x"]}), "gopher_quality", off).kept.num_rows == 1
    assert isinstance(
        build_rule_families("gopher", gopher_repetition={"max_duplicate_line_fraction": 0.5})[1],
        GopherRepetition,
    )
    assert FineWebQuality().max_duplicate_line_char_ratio == 0.1
    with pytest.raises(ConfigError, match="unknown rule family 'nope'"):
        build_rule_families("gopher,nope")


def test_text_column_and_large_string_types():
    t = pa.table({"body": pa.array([GOOD_EN, None], pa.large_string()), "id": [1, 2]})
    r = _filter(t, "fineweb", text_column="body")
    assert r.kept.schema == t.schema and r.kept["id"].to_pylist() == [1]


def test_a_task_budget_slices_the_rules_without_changing_a_verdict():
    """Inside a task the rules run on row slices that fit its kernel share (zephyr.budget.kernel_slices);
    every row's reason, the cleaned text and the counters equal the whole-table run's."""
    from zephyr.pipelines.quality.filters import annotate_drop_reasons

    from zephyr.budget import Budget, running

    texts = ([GOOD_EN, GOOD_RU, None, *EDGE.values(), GOOD_EN.replace(".", "...")] * 40)[:300]
    table = pa.table({"text": texts, "lang": (["en", "ru", "en", "en", "en", "en", "en", "en"] * 40)[:300]})
    families = build_rule_families("gopher,c4,fineweb")
    whole = annotate_drop_reasons(table, families)
    budget = Budget(1 << 20)  # kernel share 1 MiB: table.nbytes × 32 needs several slices
    assert table.nbytes * 32 > 2 * budget.kernel_scratch_bytes
    with running(budget):
        sliced = annotate_drop_reasons(table, families)
    assert sliced[0].equals(whole[0]) and sliced[1].equals(whole[1]) and sliced[2] == whole[2]


def _filter_step(*flags: str):
    """The ``heuristic_filter`` step ``zephyr filter in.parquet --output out FLAGS`` runs (its url settings
    applied: ``FilterOptions.with_urls``)."""
    from zephyr.pipelines.cli import COMMANDS

    from zephyr.cli import build_parser

    args = build_parser().parse_args(["filter", "in.parquet", "--output", "out", *flags])
    (command,) = [c for c in COMMANDS if c.words == "filter"]
    return command.configs(vars(args))["config"].with_urls()


def test_one_default_rule_set_for_the_cli_the_stage_and_the_batch_ops():
    """The default rules are declared once (``zephyr.pipelines.quality.DEFAULT_RULES``); every entry point applies them, and the
    CLI and the pipeline stage hold them in the same config (``config.HeuristicFilterConfig``)."""
    from zephyr.pipelines.quality import DEFAULT_RULES
    from zephyr.pipelines.quality.config import HeuristicFilterConfig
    from zephyr.pipelines.quality.filters import HeuristicFilter
    from zephyr.pipelines.steps import HeuristicFilterStep

    assert DEFAULT_RULES == ("gopher", "c4", "fineweb")
    assert FilterAnnotator().rules == HeuristicFilter().rules == ",".join(DEFAULT_RULES)
    stage = HeuristicFilterStep()
    assert stage.filter == _filter_step().filter == HeuristicFilterConfig()
    assert stage.filter.rules == list(DEFAULT_RULES)


def test_cli_and_stage_refuse_the_same_bad_rules():
    from zephyr.pipelines.quality.config import HeuristicFilterConfig

    with pytest.raises(ConfigError, match="^--rules: unknown rule family 'c5'; allowed: c4"):
        _filter_step("--rules", "gopher, c5")
    with pytest.raises(ConfigError, match="^rules: unknown rule family 'c5'"):
        HeuristicFilterConfig(["gopher", "c5"])
    with pytest.raises(ConfigError, match="^overrides: "):
        HeuristicFilterConfig(["c4"], {"c4": {"no_such_threshold": 3}})


def test_rule_names_are_checked_in_one_place():
    def kinds(families):
        return [type(f).__name__ for f in families]

    assert kinds(build_rule_families(" gopher, ,c4 ")) == kinds(build_rule_families(["gopher", "c4"]))
    assert kinds(build_rule_families("gopher,c4")) == ["GopherQuality", "GopherRepetition", "C4Quality"]
    with pytest.raises(ConfigError, match="^rules: unknown rule family 'c5'; allowed: c4"):
        build_rule_families("gopher,c5,url,fine_web")
    with pytest.raises(ConfigError, match="^rules: give at least one rule family"):
        build_rule_families(" , ")


@pytest.mark.parametrize("name", ["zephyr.pipelines.quality.filters"])
def test_doctests(name):
    """The runnable examples of the filter path (``HeuristicFilter``)."""
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
