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
    from typing import TYPE_CHECKING as _TYPE_CHECKING

    __all__: list[str] = []
