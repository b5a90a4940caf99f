"""`make demo`: export the seed-001 MNIST MLP, then classify scikit-learn's digits through a Session.

Trains first when the native training engine is available (``meganeura train``), otherwise runs
the untrained model so the pipeline itself is shown.
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
    onnx_path = out / "mnist_mlp.onnx"
    export_onnx(graph, onnx_path)
    print(f"exported {onnx_path.relative_to(ROOT)} (open it with: meganeura view {onnx_path.relative_to(ROOT)})")
    subprocess.run([Path(sys.executable).parent / "meganeura", "inspect", str(onnx_path)], check=True)

    session = build_inference_session(graph)
    checkpoint = out / "mnist_mlp.safetensors"
    trained = checkpoint.exists()
    if trained:
        from safetensors.numpy import load_file

        for name, value in load_file(checkpoint).items():
            if name in dict(graph.leaves("parameter")):
                session.set_parameter(name, value)
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
