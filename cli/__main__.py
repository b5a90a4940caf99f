"""``python -m meganeura_onnx.cli``: the ``meganeura`` command."""

from .main import main

main(prog_name="meganeura")
