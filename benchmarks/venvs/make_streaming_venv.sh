#!/usr/bin/env bash
# mosaicml-streaming for the loader benchmark (benchmarks/loader_throughput.py runs it when this venv exists).
#
# Why the torch here is PyPI's (CUDA) build and not the CPU wheel on local disk (/opt/wheels): streaming
# imports torchvision when it is imported (streaming/__init__.py -> streaming.vision -> torchvision.datasets),
# and PyPI only has CUDA builds of torchvision, whose _C.so links libtorch_cuda.so. With the CPU torch
# 2.13.0 + torchvision 0.28.0 the import fails ("operator torchvision::nms does not exist"; tried
# 2026-11-22). So pip resolves a matching torch/torchvision pair from PyPI (~4 GB with the nvidia wheels);
# it runs on the CPU like the CPU build. Set STREAMING_CPU_TORCH=1 to retry the local CPU wheel first.
source "$(dirname "$0")/_common.sh"
PY=$(make_venv streaming python3.11)
if [ "${STREAMING_CPU_TORCH:-0}" = "1" ]; then
  "$PY" -m pip install -q "torch==2.13.0"
fi
"$PY" -m pip install -q "mosaicml-streaming==0.13.*" "numpy" "psutil"
"$PY" -c "import streaming, torch, numpy; print('streaming', streaming.__version__, 'torch', torch.__version__, 'numpy', numpy.__version__)"
