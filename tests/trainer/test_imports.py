"""The whole trainer imports with torch, numpy and fsspec only (training nodes have no data stack)."""

from __future__ import annotations

import subprocess
import sys

BLOCKED = "{'pyarrow','polars','dask','distributed','fasttext','vortex','duckdb','datasketch','tokenizers','yaml','pandas'}"


def test_every_trainer_module_imports_without_the_data_stack() -> None:
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        f"        if name.split('.')[0] in {BLOCKED}:\n"
        "            raise ImportError('blocked ' + name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "import zephyr.trainer as t\n"
        "for m in ['config','model','moe','devices','data','checkpoint','metrics','train','cli','check']:\n"
        "    __import__('zephyr.trainer.' + m)\n"
        "from zephyr.trainer import train, TrainConfig, build_model\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd="/", capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
