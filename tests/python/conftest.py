"""pytest set-up for the moekit Python tests.

moekit is imported from PYTHONPATH (scripts/test.sh points it at <build>/python, where the CMake
build puts the extension next to a copy of python/moekit) or from an installed wheel.
Random inputs come from one seed per test, printed on failure (MOEKIT_TEST_SEED fixes it).
"""

import os
import random
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))  # numpy_reference


def _torch():
    try:
        import torch  # noqa: F401

        return torch
    except Exception:
        return None


def has_cuda() -> bool:
    torch = _torch()
    if torch is None or not torch.cuda.is_available():
        return False
    import moekit

    return bool(moekit.info()["cuda_build"])


@pytest.fixture
def seed(request):
    s = int(os.environ.get("MOEKIT_TEST_SEED", random.randrange(1 << 31)))
    request.node.user_properties.append(("seed", s))
    print(f"seed={s} (MOEKIT_TEST_SEED={s} reproduces)")
    return s


@pytest.fixture
def rng(seed):
    return np.random.default_rng(seed)


def pytest_report_header(config):
    try:
        import moekit

        info = moekit.info()
        return (f"moekit {info['version']} from {os.path.dirname(moekit.__file__)}: cuda_build="
                f"{info['cuda_build']} device={info['device']} torch={info['torch']}")
    except Exception as e:  # the import error shows in the tests themselves
        return f"moekit not importable: {e}"
