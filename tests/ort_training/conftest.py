"""Options and fixtures of the onnxruntime-training tests.

These tests run for real in the onnxruntime-training venv (``make test-ort-training``); in the main
venv the modules that need ``onnxruntime.training`` skip, and the bad-input tests (which must fail
before onnxruntime-training is involved) run everywhere.
"""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MNIST_MLP = REPO / "models" / "mnist_mlp.py"
LLAMA_BLOCK = Path(__file__).resolve().parent / "llama_block.py"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--native-python",
        default=None,
        help="Interpreter of the main venv (onnxruntime >= 1.20, the native engine) for the parity tests; `make test-ort-training` passes it.",
    )


@pytest.fixture
def native_python(request: pytest.FixtureRequest) -> str:
    """Path of the main venv's python, or skip the test (parity needs both environments)."""
    path = request.config.getoption("--native-python", default=None)
    if not path:
        pytest.skip("native-vs-ort-training parity needs --native-python=<main venv python> (make test-ort-training passes it)")
    if not Path(path).exists():
        pytest.fail(f"--native-python {path} does not exist")
    return path
