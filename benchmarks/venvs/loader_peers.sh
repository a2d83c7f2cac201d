#!/usr/bin/env bash
# litdata and mosaicml-streaming for the loader benchmark, in one venv (benchmarks/loader_throughput.py runs them
# when benchmarks/.venvs/loader-peers exists). Replaces make_streaming_venv.sh's 4 GB CUDA install.
#
# Why --no-deps: both peers' requirements pull torch from PyPI (the CUDA build, ~4 GB with the nvidia wheels)
# and torchvision, whose PyPI builds link libtorch_cuda and fail to import with the CPU torch. The benchmark
# needs neither the GPU nor torchvision: so the venv gets the CPU torch wheel on local disk when there is one
# (else PyPI's), the peers without their requirements, and the modules their imports need (tried 2026-11-25:
# litdata 0.2.76, mosaicml-streaming 0.13.0). streaming imports two torchvision names at import time, for its
# image datasets only (streaming/vision/base.py: VisionDataset, to_tensor); a stub package provides them and
# raises if an image path ever calls it. No token path of either peer touches torchvision.
source "$(dirname "$0")/_common.sh"
PY=$(make_venv loader-peers python3.11)
CPU_TORCH=$(ls /opt/wheels/torch-*+cpu-cp311-*.whl 2>/dev/null | head -1 || true)
"$PY" -m pip install -q "${CPU_TORCH:-torch}" numpy psutil
"$PY" -m pip install -q --no-deps "litdata==0.2.76" "lightning-utilities" "mosaicml-streaming==0.13.0"
"$PY" -m pip install -q packaging boto3 requests filelock "xxhash<4" zstd python-snappy cramjam Brotli tqdm \
  catalogue pillow "transformers>=4.21,<5"
SITE=$("$PY" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
mkdir -p "$SITE/torchvision/datasets" "$SITE/torchvision/transforms"
cat > "$SITE/torchvision/__init__.py" <<'PYEOF'
"""Stub (benchmarks/venvs/loader_peers.sh): only what mosaicml-streaming imports; image paths are unsupported."""
PYEOF
cat > "$SITE/torchvision/datasets/__init__.py" <<'PYEOF'
class VisionDataset:  # streaming.vision.base subclasses it; the token benchmark never instantiates one
    def __init__(self, *args, **kwargs):
        raise NotImplementedError("torchvision stub: image datasets are not available in this venv")
PYEOF
echo "" > "$SITE/torchvision/transforms/__init__.py"
cat > "$SITE/torchvision/transforms/functional.py" <<'PYEOF'
def to_tensor(*args, **kwargs):
    raise NotImplementedError("torchvision stub: image transforms are not available in this venv")
PYEOF
"$PY" -c "import litdata, streaming, torch; print('litdata', litdata.__version__, 'streaming', streaming.__version__, 'torch', torch.__version__)"
