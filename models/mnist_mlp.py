"""The seed-001 two-layer MLP for MNIST: 784 -> 128 (ReLU) -> 10, cross-entropy loss.

Model-file contract (``meganeura export/train``): ``build(**kwargs) -> Graph`` with the loss (or
logits) as output 0. Parameter names follow Hugging Face conventions (``fc1.weight`` ...).
"""

from __future__ import annotations

from meganeura_onnx import Graph


def build(batch: int = 32, hidden: int = 128, inputs: int = 784, classes: int = 10, loss: bool = True) -> Graph:
    """The MLP; with ``loss=False`` the output is the logits ``[batch, classes]`` (inference)."""
    g = Graph()
    x = g.input("x", [batch, inputs])
    w1 = g.parameter("fc1.weight", [inputs, hidden])
    b1 = g.parameter("fc1.bias", [hidden])
    w2 = g.parameter("fc2.weight", [hidden, classes])
    b2 = g.parameter("fc2.bias", [classes])
    h = g.relu(g.bias_add(g.matmul(x, w1), b1))
    logits = g.bias_add(g.matmul(h, w2), b2)
    if loss:
        labels = g.input("labels", [batch, classes])
        g.set_outputs([g.cross_entropy_loss(logits, labels)])
    else:
        g.set_outputs([logits])
    return g
