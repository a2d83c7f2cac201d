"""What ``TextTokenizer`` reads from a ``tokenizer.json`` before any library loads it: the parsed JSON (or an
error that names the file and says what it should be), the special-token names it looks for, GPT-2's byte
alphabet and pre-tokenizer regex (the tiktoken engine's rebuild), and the probe texts every engine must encode
exactly as HF does."""

from __future__ import annotations

import json
from typing import Any

from zephyr.errors import ConfigError

__all__ = [
    "BOS_CANDIDATES",
    "EOS_CANDIDATES",
    "EXPECTED_TOKENIZER",
    "GPT2_PATTERN",
    "PROBE_TEXTS",
    "bytes_to_unicode",
    "parse_tokenizer_json",
]

EOS_CANDIDATES = (
    "<|endoftext|>",
    "<｜end▁of▁sentence｜>",
    "<|end_of_text|>",
    "</s>",
    "<eos>",
    "<|eos|>",
    "<|im_end|>",
)
BOS_CANDIDATES = ("<｜begin▁of▁sentence｜>", "<|begin_of_text|>", "<s>", "<bos>", "<|startoftext|>")

# GPT-2's pre-tokenizer regex, as HF's ByteLevel(use_regex=True) applies it.
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""

PROBE_TEXTS: tuple[str, ...] = (
    "Hello, world! It's a test: we'll see what they've done, I'd say, you're right, I'm sure.",
    "  leading spaces,\ttabs,\n\nnewlines   and   runs of    spaces   \n",
    "Numbers 1234567890 3.14159 1e-10 0x1F 2024-11-22 ½ ² ٣",
    "Ünïcödé façade naïve coöperate Straße İstanbul ΑΒΓ αβγ Привет мир",
    "中文字符测试，日本語のテキスト、한국어 텍스트 ไทย العربية עברית हिन्दी",
    "emoji 😀🎉👍🏽 👨‍👩‍👧 flags 🇺🇸 ZWJ a\u200db soft\u00adhyphen",
    "def f(x):\n    return {'a': [1, 2, 3]} if x else None  # comment\n\tindent\r\nCRLF",
    "special <|endoftext|> inside text, and </s> <s> [CLS] too",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "",
    " ",
    "''''''\"\"\"\"``` --- *** ### @@@ !!! ??? ... ,,, ;;; ::: ~~~",
    "\u0000\u0001\u007f control \ufeff bom \U0001f600 \ud7ff \ue000",
)


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte → printable-character alphabet (printable Latin-1 bytes map to themselves)."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    keep += list(range(ord("®"), ord("ÿ") + 1))
    mapping = {b: chr(b) for b in keep}
    extra = 0
    for b in range(256):
        if b not in mapping:
            mapping[b] = chr(256 + extra)
            extra += 1
    return mapping


EXPECTED_TOKENIZER = (
    "expected a Hugging Face tokenizer.json (a JSON object with a 'model', as written by tokenizers' "
    "Tokenizer.save or transformers' save_pretrained); a vocab.json, merges.txt or .model file is not one"
)


def parse_tokenizer_json(data: bytes, path: str | None) -> dict[str, Any]:
    """The parsed tokenizer.json, or a ``ConfigError`` that names the file and says what it should be."""
    name = path or "the tokenizer bytes"
    expected = EXPECTED_TOKENIZER
    try:
        config = json.loads(data)
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{name} is not a tokenizer.json: not UTF-8 text ({exc.reason}); {expected}"
        ) from exc
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"{name} is not a tokenizer.json: invalid JSON at line {exc.lineno} column {exc.colno} ({exc.msg}); "
            f"{expected}"
        ) from exc
    if not isinstance(config, dict) or not isinstance(config.get("model"), dict):
        kinds = {
            list: "a JSON array",
            str: "a JSON string",
            int: "a number",
            float: "a number",
            bool: "a boolean",
        }
        found = (
            "an object without a 'model' object"
            if isinstance(config, dict)
            else kinds.get(type(config), "null")
        )
        raise ConfigError(f"{name} is not a tokenizer.json: it holds {found}; {expected}")
    return config
