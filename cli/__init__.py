"""The ``meganeura`` command (installed as ``meganeura_onnx.cli``)."""
