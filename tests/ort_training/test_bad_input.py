"""Graphs that cannot become training artifacts fail with a clear message before onnxruntime-training runs.

These run in every environment: the checks need only the Graph, and the call must never reach
onnxruntime-training (asserted by making its import fail loudly if attempted).
"""

from __future__ import annotations

import pytest

from meganeura_onnx import Graph
from meganeura_onnx import training_artifacts as ta


@pytest.fixture(autouse=True)
def no_ort_training(monkeypatch: pytest.MonkeyPatch) -> None:
    def forbidden() -> None:
        raise AssertionError("onnxruntime-training was called for a graph that should have been rejected first")

    monkeypatch.setattr(ta, "import_ort_training", forbidden)


def mlp(loss: bool = True) -> Graph:
    g = Graph()
    x = g.input("x", [4, 3])
    logits = g.bias_add(g.matmul(x, g.parameter("w", [3, 2])), g.parameter("b", [2]))
    g.set_outputs([g.cross_entropy_loss(logits, g.input("labels", [4, 2])) if loss else logits])
    return g


def test_output_that_is_not_a_scalar_loss_is_rejected(tmp_path):
    with pytest.raises(ta.TrainingArtifactsError, match=r"output 0 must be the scalar loss .*got node \d+ \(bias_add\) f32\[4, 2\]"):
        ta.generate_training_artifacts(mlp(loss=False), tmp_path)


def test_graph_without_outputs_is_rejected(tmp_path):
    g = Graph()
    g.parameter("w", [2])
    with pytest.raises(ta.TrainingArtifactsError, match="no outputs"):
        ta.generate_training_artifacts(g, tmp_path)


def test_parameter_only_behind_greater_is_rejected(tmp_path):
    g = Graph()
    x = g.input("x", [4, 3])
    w = g.parameter("w", [4, 3])
    gate = g.parameter("gate", [4, 3])
    mask = g.greater(gate, x)  # no gradient flows back through greater
    g.set_outputs([g.mse_loss(g.mul(g.mul(x, w), mask), g.input("t", [4, 3]))])
    with pytest.raises(
        ta.TrainingArtifactsError, match=r"parameters \['gate'\] reach the loss only through ops without a gradient \(greater\)"
    ):
        ta.generate_training_artifacts(g, tmp_path)


def test_parameter_that_does_not_reach_the_loss_is_rejected(tmp_path):
    g = mlp()
    g.parameter("unused.weight", [3, 3])
    with pytest.raises(ta.TrainingArtifactsError, match=r"parameters \['unused.weight'\] do not reach the loss"):
        ta.generate_training_artifacts(g, tmp_path)


def test_graph_without_parameters_is_rejected(tmp_path):
    g = Graph()
    g.set_outputs([g.mse_loss(g.input("p", [2, 2]), g.input("t", [2, 2]))])
    with pytest.raises(ta.TrainingArtifactsError, match="no parameters"):
        ta.generate_training_artifacts(g, tmp_path)


def test_unknown_optimizer_is_rejected(tmp_path):
    with pytest.raises(ValueError, match=r"optimizer must be one of \('adamw', 'sgd'\), got 'adam'"):
        ta.generate_training_artifacts(mlp(), tmp_path, optimizer="adam")


def test_nothing_is_written_for_a_rejected_graph(tmp_path):
    with pytest.raises(ta.TrainingArtifactsError):
        ta.generate_training_artifacts(mlp(loss=False), tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_missing_onnxruntime_training_says_how_to_install(monkeypatch, tmp_path):
    import builtins

    real_import = builtins.__import__

    def fake_import(name, *args, **kwargs):
        if name.startswith("onnxruntime.training"):
            raise ModuleNotFoundError("No module named 'onnxruntime.training'")
        return real_import(name, *args, **kwargs)

    monkeypatch.undo()  # the real import_ort_training, with the import itself failing
    monkeypatch.setattr(builtins, "__import__", fake_import)
    with pytest.raises(ImportError, match=r"make ort-training"):
        ta.generate_training_artifacts(mlp(), tmp_path)
