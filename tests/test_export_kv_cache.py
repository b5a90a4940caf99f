"""Our own KV-cache graphs as files: a plain onnxruntime user feeds the caches back and gets the
tokens our Session (prefill + decode, caches on the device) generates."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort

from meganeura_onnx import export_onnx
from meganeura_onnx.generation import generate
from meganeura_onnx.init import default_parameters

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "models"))
import llama  # noqa: E402


def test_decode_graph_run_by_plain_onnxruntime_with_caches_fed_back_matches_the_session(tmp_path):
    cfg = llama.PRESETS["tiny"]
    decode = llama.build_graph(cfg, "decode", 1, max_seq=32)
    params = default_parameters(decode, seed=7)
    prompt = [5, 17, 200, 3, 99]
    want = list(generate(llama.LlamaRunner(cfg, params, max_seq=32, prefill_chunk=4), prompt, 8))

    export_onnx(decode, tmp_path / "decode.onnx", parameters=params)
    sess = ort.InferenceSession(str(tmp_path / "decode.onnx"), providers=["CPUExecutionProvider"])
    caches = {i.name: np.zeros(i.shape, np.float32) for i in sess.get_inputs() if "cache" in i.name}
    assert {o.name for o in sess.get_outputs()} == {"output_0"} | {f"{name}.next" for name in caches}
    got, token = [], None
    for pos in range(len(prompt) + 7):
        token = prompt[pos] if pos < len(prompt) else token
        outs = sess.run(None, {"input_ids": np.array([token], np.uint32), "kv_pos": np.array([pos], np.uint32), **caches})
        named = dict(zip([o.name for o in sess.get_outputs()], outs, strict=True))
        caches = {name: named[f"{name}.next"] for name in caches}  # this step's caches feed the next
        if pos >= len(prompt) - 1:
            token = int(named["output_0"].argmax())
            got.append(token)
    assert got == want
