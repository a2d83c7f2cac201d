"""Document masking, RoPE positions, parameter counts of the presets, and the FLOP formula."""

from __future__ import annotations

import pytest
import torch
from zephyr.trainer.config import PRESETS, ModelConfig, get_preset
from zephyr.trainer.model import (
    build_attention_mask,
    build_model,
    count_params,
    document_ids,
    flops_per_token,
)


def _positions(doc_lengths: list[int]) -> torch.Tensor:
    return torch.cat([torch.arange(n) for n in doc_lengths])[None]


def test_document_ids_and_mask() -> None:
    pos = torch.tensor([[3, 4, 0, 1, 2, 0]])  # a fragment, a 3-token document, a 1-token document
    assert document_ids(pos).tolist() == [[0, 0, 1, 1, 1, 2]]
    mask = build_attention_mask(pos, "sdpa")[0, 0]
    assert mask[3].tolist() == [False, False, True, True, False, False]
    assert mask[5].tolist() == [False] * 5 + [True]


@pytest.mark.parametrize("dispatch", ["grouped_mm", "loop"])
def test_no_attention_across_documents(dispatch: str) -> None:
    """Perturbing one document's tokens leaves every other document's logits unchanged."""
    torch.manual_seed(0)
    model = build_model(get_preset("tiny"), dispatch=dispatch).eval()
    pos = _positions([10, 7, 15])
    ids = torch.randint(0, 500, (1, 32))
    perturbed = ids.clone()
    perturbed[0, 10:17] = torch.randint(0, 500, (7,))  # the middle document
    with torch.no_grad():
        before, _ = model(ids, pos)
        after, _ = model(perturbed, pos)
    outside = torch.cat([torch.arange(10), torch.arange(17, 32)])
    torch.testing.assert_close(after[0, outside], before[0, outside], rtol=1e-5, atol=1e-5)
    assert not torch.allclose(after[0, 10:17], before[0, 10:17])  # the perturbed document did change
    # and without document boundaries the later tokens do see the change (the mask is what isolates them)
    flat = torch.arange(32)[None]
    with torch.no_grad():
        a, _ = model(ids, flat)
        b, _ = model(perturbed, flat)
    assert not torch.allclose(a[0, 17:], b[0, 17:])


def test_a_document_computes_the_same_wherever_it_is_packed() -> None:
    """RoPE uses within-document positions, so a document's logits do not depend on its offset."""
    torch.manual_seed(0)
    model = build_model(get_preset("tiny-dense")).eval()
    doc = torch.randint(0, 500, (1, 12))
    filler = torch.randint(0, 500, (1, 20))
    with torch.no_grad():
        alone, _ = model(doc, torch.arange(12)[None])
        packed, _ = model(torch.cat([filler, doc], 1), _positions([20, 12]))
    torch.testing.assert_close(packed[0, 20:], alone[0], rtol=1e-5, atol=1e-5)


def test_moe_785m_parameter_counts() -> None:
    counts = count_params(get_preset("moe-785m"))
    assert counts.total == pytest.approx(785e6, rel=0.005)
    assert counts.active == pytest.approx(152e6, rel=0.005)


def test_counts_match_a_real_model_and_active_rule() -> None:
    cfg = get_preset("tiny")
    model = build_model(cfg)
    counts = count_params(cfg)
    assert counts.total == sum(p.numel() for p in model.parameters())
    moe = cfg.moe
    per_expert = 3 * cfg.d_model * moe.expert_ffn_dim
    idle = cfg.n_layers * (moe.num_experts - moe.top_k) * per_expert
    assert counts.active == counts.total - idle - cfg.vocab_size * cfg.d_model


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_builds_on_meta(name: str) -> None:
    counts = count_params(PRESETS[name])
    assert 0 < counts.active <= counts.total < 1.2e9


def test_flops_per_token_formula() -> None:
    cfg = get_preset("moe-785m")
    expected = 6 * count_params(cfg).active + 12 * 12 * 768 * 2048
    assert flops_per_token(cfg, 2048) == expected


def test_model_config_errors_name_both_fields() -> None:
    from zephyr.errors import ConfigError

    with pytest.raises(ConfigError, match="n_heads"):
        ModelConfig(d_model=64, n_heads=5)
