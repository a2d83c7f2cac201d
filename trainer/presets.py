"""Named model presets, from ``tiny`` (CPU tests, milliseconds per step) to ``moe-1b`` (≈1.1B total parameters).

Parameter counts (``count_params`` builds each model on the meta device; tests/trainer/test_model.py checks moe-785m):

============ ======= ====== ====== ======= ===== ============ =============
preset       d_model layers heads  experts top-k total params active params
============ ======= ====== ====== ======= ===== ============ =============
tiny         64      2      4      8 (+1)  2     0.32M        0.14M
tiny-dense   64      2      4      dense   –     0.17M        0.14M
small        256     4      4      16      2     39.4M        15.5M
moe-785m     768     12     12     32      4     785.4M       152.2M
moe-1b       1024    12     16     32 (+1) 4     1.09B        243.8M
============ ======= ====== ====== ======= ===== ============ =============

(+1) = one shared expert.
"Active" counts what one token touches, excluding the input embedding table (a lookup, no FLOPs) but
including the output head: the convention of torchtitan's ``get_nparams_and_flops``, used for MFU.
"""

from __future__ import annotations

from zephyr.trainer.model_config import ModelConfig, MoEConfig

from zephyr.errors import ConfigError

__all__ = ["PRESETS", "get_preset"]

PRESETS: dict[str, ModelConfig] = {
    "tiny": ModelConfig(
        vocab_size=512,
        d_model=64,
        n_layers=2,
        n_heads=4,
        dense_ffn_dim=128,
        moe=MoEConfig(num_experts=8, top_k=2, expert_ffn_dim=64, num_shared_experts=1),
    ),
    "tiny-dense": ModelConfig(vocab_size=512, d_model=64, n_layers=2, n_heads=4, dense_ffn_dim=192, moe=None),
    "small": ModelConfig(
        vocab_size=50304,
        d_model=256,
        n_layers=4,
        n_heads=4,
        qk_norm=True,
        moe=MoEConfig(num_experts=16, top_k=2, expert_ffn_dim=256),
    ),
    # 785.3M total / 152.1M active: attention 4·768² and 32 SwiGLU experts of 3·768² per layer, untied head.
    "moe-785m": ModelConfig(
        vocab_size=50304,
        d_model=768,
        n_layers=12,
        n_heads=12,
        moe=MoEConfig(num_experts=32, top_k=4, expert_ffn_dim=768, score_func="softmax"),
    ),
    "moe-1b": ModelConfig(
        vocab_size=50304,
        d_model=1024,
        n_layers=12,
        n_heads=16,
        qk_norm=True,
        moe=MoEConfig(
            num_experts=32,
            top_k=4,
            expert_ffn_dim=768,
            num_shared_experts=1,
            score_func="sigmoid",
            route_norm=True,
        ),
    ),
}


def get_preset(name: str) -> ModelConfig:
    """The preset called ``name``; an unknown name raises listing the known ones."""
    try:
        return PRESETS[name]
    except KeyError:
        raise ConfigError(f"unknown model preset {name!r}; choose one of {sorted(PRESETS)}") from None
