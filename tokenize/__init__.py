"""zephyr.tokenize: token shards (writer) and the streaming loader that feeds torch.

This folder is mapped to ``zephyr.tokenize`` by pyproject. Run from the repository root, Python puts the
root on ``sys.path`` and ``import tokenize`` (done by ``linecache``, ``inspect``, ``traceback``) would find
this folder instead of the standard library. The guard below notices that case (we are being imported under
the bare name ``tokenize``) and loads the standard library module in our place, so nothing is shadowed.
"""

if __name__ == "tokenize":  # imported as the stdlib name from a checkout root: step aside
    import importlib.util as _util
    import os as _os
    import sys as _sys
    import sysconfig as _sysconfig

    _spec = _util.spec_from_file_location(
        "tokenize", _os.path.join(_sysconfig.get_paths()["stdlib"], "tokenize.py")
    )
    _stdlib_tokenize = _util.module_from_spec(_spec)
    _sys.modules["tokenize"] = _stdlib_tokenize
    _spec.loader.exec_module(_stdlib_tokenize)
else:
    # Public names load lazily: the loader side pulls in only numpy, torch and fsspec; the writer side
    # (tokenizers, pyarrow, the engine) loads only when a writer name is used.
    from typing import TYPE_CHECKING as _TYPE_CHECKING

    from zephyr._lazy import lazy_exports as _lazy_exports

    if _TYPE_CHECKING:
        from zephyr.tokenize._samples import RepetitionFilter
        from zephyr.tokenize._storage import read_documents
        from zephyr.tokenize.config import TokenizeConfig
        from zephyr.tokenize.loader import TokenDataLoader, TokenLoader
        from zephyr.tokenize.shards import FORMAT_VERSION, Manifest, read_manifest
        from zephyr.tokenize.tokenizer import TextTokenizer
        from zephyr.tokenize.train_tokenizer import train_tokenizer
        from zephyr.tokenize.writer import TokenizeResult, write_token_shards

    __getattr__, __dir__, __all__ = _lazy_exports(__name__, globals())
