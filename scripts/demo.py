"""`make demo`, second half: export the trained MNIST MLP and classify scikit-learn's digits.

`make demo` first runs `meganeura train models/mnist_mlp.py --checkpoint out/mnist_mlp.safetensors`;
this script exports the trained weights to ONNX (`out/mnist_mlp.onnx`), inspects the file, and
runs the held-out digits through an inference Session. Without the checkpoint it runs the
untrained (default-init) model, so the pipeline itself is still shown.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "models"))

import mnist_mlp  # noqa: E402

from meganeura_onnx import build_inference_session, export_onnx  # noqa: E402


def main() -> None:
    out = ROOT / "out"
    out.mkdir(exist_ok=True)
    d = mnist_mlp.data()
    x_test, y_test = d["x_test"], d["y_test"].argmax(axis=1)
    batch = len(x_test)
    graph = mnist_mlp.build(batch=batch, loss=False)
    checkpoint = out / "mnist_mlp.safetensors"  # written by `meganeura train` (make demo runs it first)
    trained = checkpoint.exists()
    weights = {}
    if trained:
        from safetensors.numpy import load_file

        names = set(graph.parameters())
        weights = {k: v for k, v in load_file(checkpoint).items() if k in names}  # adam_m/adam_v are optimizer state
    onnx_path = out / "mnist_mlp.onnx"
    export_onnx(graph, onnx_path, parameters=weights)
    print(f"exported {onnx_path.relative_to(ROOT)} (open it with: meganeura view {onnx_path.relative_to(ROOT)})")
    subprocess.run([Path(sys.executable).parent / "meganeura", "inspect", str(onnx_path)], check=True)

    session = build_inference_session(graph, parameters=weights)
    session.set_input("x", x_test)
    session.step()
    pred = session.read_output_by_index(0).argmax(axis=1)
    acc = float((pred == y_test).mean())
    state = "trained" if trained else "untrained (default init)"
    print(f"digits test set: {batch} images, {state} MLP accuracy {acc:.1%}")
    print("first 20 predictions:", " ".join(map(str, pred[:20])))
    print("first 20 labels:     ", " ".join(map(str, y_test[:20])))
    np.save(out / "predictions.npy", pred)


if __name__ == "__main__":
    main()
