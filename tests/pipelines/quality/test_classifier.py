import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from zephyr.pipelines.quality.classifier import (
    ClassifierConfig,
    QualityScorer,
    assign_buckets,
    evaluate_classifier,
    quantile_edges,
    roc_auc,
    train_classifier,
)

from zephyr.errors import SchemaError, ZephyrError


def test_roc_auc_matches_pair_counting():
    rng = np.random.default_rng(0)
    y = rng.random(200) < 0.4
    s = np.round(rng.random(200) + y * 0.3, 1)  # ties on purpose
    pairs = [(a > b) + 0.5 * (a == b) for a in s[y] for b in s[~y]]
    assert roc_auc(y, s) == pytest.approx(np.mean(pairs))
    assert np.isnan(roc_auc(np.ones(3, bool), np.arange(3)))


def test_buckets_by_quantile():
    scores = pa.array([0.1, 0.2, 0.3, 0.4, None, 0.9, 0.95, 0.99, 0.5])
    edges = quantile_edges(scores, 4)
    b = assign_buckets(scores, edges).to_pylist()
    assert b[4] is None and sorted(x for x in b if x is not None) == [0, 0, 1, 1, 2, 2, 3, 3]


def _synthetic(n, seed):
    rng = np.random.default_rng(seed)
    hq = ["the", "history", "river", "merchants", "research", "analysis", "century", "published"]
    lq = ["click", "buy", "now", "free", "winner", "cheap", "offer", "$$$"]
    texts, labels = [], []
    for i in range(n):
        good = i % 2 == 0
        texts.append(" ".join(rng.choice(hq if good else lq, 30)) + " " + " ".join(rng.choice(hq + lq, 5)))
        labels.append("hq" if good else "lq")
    return pa.table({"text": texts, "label": labels})


def test_train_evaluate_score(tmp_path):
    model = train_classifier(_synthetic(200, 0), tmp_path / "m.bin", ClassifierConfig(epoch=5))
    report = evaluate_classifier(_synthetic(60, 1), model)
    assert report["auc"] > 0.95 and report["precision"] > 0.9 and report["recall"] > 0.9
    scored = QualityScorer(str(model))(pa.table({"text": ["the history of the river", None]}))
    assert scored["quality_score"][0].as_py() > 0.5 and scored["quality_score"][1].as_py() is None
    with pytest.raises(SchemaError, match="row 1"):
        train_classifier(pa.table({"text": ["a", "b"], "label": ["hq", "good"]}), tmp_path / "x.bin")


def test_divergence_retries_at_lower_learning_rate(tmp_path, monkeypatch):
    from zephyr.pipelines.quality import classifier

    real = classifier._fit_in_child
    rates = []

    def diverge_above(path, **kwargs):
        rates.append(kwargs["lr"])
        if kwargs["lr"] > 0.06:
            raise RuntimeError("Encountered NaN.")
        return real(path, **kwargs)

    monkeypatch.setattr(classifier, "_fit_in_child", diverge_above)
    train_classifier(_synthetic(100, 0), tmp_path / "m.bin", ClassifierConfig(epoch=2, lr=0.2))
    assert rates == [0.2, 0.1, 0.05]
    assert (tmp_path / "m.bin").exists() and not (tmp_path / "m.bin.tmp").exists()

    def always_nan(path, **kwargs):
        raise RuntimeError("Encountered NaN.")

    monkeypatch.setattr(classifier, "_fit_in_child", always_nan)
    with pytest.raises(ZephyrError, match="diverged"):
        train_classifier(_synthetic(100, 0), tmp_path / "n.bin", ClassifierConfig(epoch=2))


def test_training_from_a_script_without_a_main_guard(tmp_path):
    """The trainer's child process never re-imports the caller's ``__main__``: a plain script (no
    ``if __name__ == "__main__"``) trains once, and a failure in the child is its own message, not a NaN."""
    import subprocess
    import sys

    script = tmp_path / "train.py"
    script.write_text(
        "import pyarrow as pa\n"
        "from zephyr.pipelines.quality.classifier import ClassifierConfig, train_classifier\n"
        "texts = ['the history of the river and its towns'] * 20 + ['buy cheap pills now click here'] * 20\n"
        "table = pa.table({'text': texts, 'label': ['hq'] * 20 + ['lq'] * 20})\n"
        "train_classifier(table, 'm.bin', ClassifierConfig(epoch=2))\n"
        "print('trained')\n"
    )
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["trained"] and (tmp_path / "m.bin").exists()
    from zephyr.pipelines.quality.classifier import _fit_in_child

    with pytest.raises(RuntimeError, match="fastText training failed: .*missing.txt cannot be opened"):
        _fit_in_child(tmp_path / "x.bin", input=str(tmp_path / "missing.txt"), epoch=1)


@pytest.mark.corpus
def test_corpus_quality_set(corpus_small, tmp_path):
    model = train_classifier(pq.read_table(corpus_small / "quality" / "train.parquet"), tmp_path / "q.bin")
    report = evaluate_classifier(pq.read_table(corpus_small / "quality" / "test.parquet"), model)
    assert report["auc"] > 0.9
