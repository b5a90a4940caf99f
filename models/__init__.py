"""The built-in model files, installed as ``meganeura_onnx.models``.

Each module is a model file of the CLI's contract (``build(**kwargs) -> Graph``, and ``data()`` /
``load_generator()`` / ``SentenceEmbedder`` for the commands that need them), so every ``MODEL``
argument of ``meganeura`` takes a module name as well as a path to a ``.py`` file:

- ``mnist_mlp``: the two-layer MLP on scikit-learn's digits (``meganeura train mnist_mlp``);
- ``llama``: the LLaMA / SmolLM2 family with a KV cache (``meganeura generate llama --preset tiny``);
- ``tiny_llama``: a one-file LLaMA-style decoder with a loss, for training;
- ``bert``: a BERT encoder with mean pooling, all-MiniLM-L6-v2 by default (``meganeura embed``).

The modules are not imported here: each is loaded when a command names it.
"""
