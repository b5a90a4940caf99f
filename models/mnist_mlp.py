"""The two-layer MLP for MNIST: 784 -> 128 (ReLU) -> 10, cross-entropy loss.

Model-file contract (``meganeura export/train``): ``build(**kwargs) -> Graph`` with the loss (or
logits) as output 0; ``data()`` for ``meganeura train`` (see ``meganeura train --help``). The
training graph also outputs the logits as output 1, named ``logits``: ``meganeura train`` reports
the test accuracy from it, and ``--export`` writes the graph computing only it (input ``x``). Parameter names follow Hugging Face conventions (``fc1.weight`` ...).
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
        g.set_outputs({"loss": g.cross_entropy_loss(logits, labels), "logits": logits})
    else:
        g.set_outputs({"logits": logits})
    return g


def data(seed: int = 0, test_fraction: float = 0.25) -> dict:
    """scikit-learn's digits (1,797 8x8 images) as MNIST-shaped data.

    Preprocessing: pixels 0..16 scaled to 0..1, each 8x8 image upsampled 3x (nearest) to 24x24 and
    zero-padded by 2 on every side to 28x28 = 784 features, like an MNIST digit with its border.
    Labels one-hot ``[n, 10]``. A seeded, stratified split: ``x_train, y_train, x_test, y_test``.
    """
    import numpy as np
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    images = digits.images.astype(np.float32) / 16.0
    images = images.repeat(3, axis=1).repeat(3, axis=2)
    x = np.pad(images, ((0, 0), (2, 2), (2, 2))).reshape(len(images), 784)
    y = np.eye(10, dtype=np.float32)[digits.target]
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=test_fraction, random_state=seed, stratify=digits.target)
    return {"x_train": x_train, "y_train": y_train, "x_test": x_test, "y_test": y_test}
