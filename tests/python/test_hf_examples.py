"""The Hugging Face drop-in examples (examples/python/hf_qwen3_moe.py) as tests on the GPU: every
sparse MoE block of a Qwen3-MoE and a Mixtral replaced by moekit, bf16 then NVFP4 / MXFP4; the
bounds are the example's (logits relative error, greedy tokens equal or diverging only at a
reference near-tie)."""

import os
import sys

import pytest

from conftest import has_cuda

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not has_cuda(), reason="needs torch with CUDA")]
pytest.importorskip("transformers")

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples", "python"))


@pytest.mark.parametrize("kind", ["qwen3_moe", "mixtral"])
def test_drop_in(kind):
    import hf_qwen3_moe as ex

    r = ex.run_model(kind, ("bf16", "nvfp4", "mxfp4"), hidden=512, inter=256, experts=16, top_k=4,
                     layers=2, steps=8, timing_tokens=(1,))
    for scheme, s in r["schemes"].items():
        assert s["backend"].startswith("cuda_"), (scheme, s["backend"])
        assert s["pass"], (scheme, s)
