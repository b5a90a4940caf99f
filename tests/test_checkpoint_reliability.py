"""Every safetensors reader validates the whole file before using it; checkpoints carry a checksum;
a failed load changes nothing in the session; temp files never outlive their writer.

The fuzz corrupts a valid checkpoint in several hundred ways (truncation, flipped bytes, structured
header lies); every reader (``load_checkpoint``, ``TrainingSession.load_checkpoint``, the Hugging
Face readers) must either return exactly the original content or raise ``ValueError`` naming the
file, and a session that refused a file must hold what it held before.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from meganeura_onnx import Graph
from meganeura_onnx.io import Checkpoint, checkpoint_shapes, load_checkpoint, read_safetensors, save_checkpoint
from meganeura_onnx.runtime import checkpoint as checkpoint_module
from meganeura_onnx.runtime.safetensors_file import SafetensorsError, read_header
from meganeura_onnx.runtime.training import build_session


def mlp() -> Graph:
    g = Graph()
    x = g.input("x", [4, 6])
    h = g.relu(g.bias_add(g.matmul(x, g.parameter("w1", [6, 5])), g.parameter("b1", [5])))
    g.set_outputs([g.mse_loss(g.matmul(h, g.parameter("w2", [5, 3])), g.input("y", [4, 3]))])
    return g


def _trained(path: Path):
    s = build_session(mlp(), optimizer="adam")
    s.set_adam(1e-2)
    rng = np.random.default_rng(0)
    for _ in range(3):
        s.set_input("x", rng.normal(size=(4, 6)))
        s.set_input("y", rng.normal(size=(4, 3)))
        s.step()
    s.save_checkpoint(path, metadata={"epoch": "1"})
    return s


def _split(blob: bytes) -> tuple[dict, bytes]:
    n = struct.unpack("<Q", blob[:8])[0]
    return json.loads(blob[8 : 8 + n]), blob[8 + n :]


def _join(header: dict, data: bytes) -> bytes:
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + data


def _structured_lies(header: dict, data: bytes) -> list[tuple[str, bytes]]:
    """Header edits that each make the file invalid, with a label."""
    names = sorted(k for k in header if k != "__metadata__")
    first, last = names[0], names[-1]
    out = []

    def edit(label, fn, payload=data):
        h = json.loads(json.dumps(header))
        fn(h)
        out.append((label, _join(h, payload)))

    for bad in ("F99", "", 3, None, "f32"):
        edit(f"dtype {bad!r}", lambda h, b=bad: h[last].__setitem__("dtype", b))
    edit("dtype I64 of the same size", lambda h: h[last].update(dtype="I64", shape=[int(np.prod(h[last]["shape"])) // 2]))
    edit("dtype F64", lambda h: h[last].update(dtype="F64", shape=[int(np.prod(h[last]["shape"])) // 2]))
    for bad in ([-1, 5], [2.5, 2], [True, 30], "30", [None], {"a": 1}):
        edit(f"shape {bad!r}", lambda h, b=bad: h[first].__setitem__("shape", b))
    for bad in ([0, 10**12], [-4, 0], [10, 5], [0], "0,4", [0.0, 4.0], [0, len(data) + 4]):
        edit(f"offsets {bad!r}", lambda h, b=bad: h[first].__setitem__("data_offsets", b))
    edit(
        "overlap",
        lambda h: h[last].__setitem__("data_offsets", list(h[first]["data_offsets"])) or h[last].__setitem__("shape", h[first]["shape"]),
    )
    edit("entry not an object", lambda h: h.__setitem__(first, [1, 2]))
    edit("entry missing shape", lambda h: h[first].pop("shape"))
    edit("metadata not strings", lambda h: h["__metadata__"].__setitem__("step", 3))
    edit("metadata a list", lambda h: h.__setitem__("__metadata__", ["a"]))
    for bad in ("-3", "abc", "1.5", "", " 2", "1e3", "٣"):
        edit(f"step {bad!r}", lambda h, b=bad: h["__metadata__"].__setitem__("step", b))
    edit("format", lambda h: h["__metadata__"].__setitem__("format", "other-format-9"))
    edit("checksum", lambda h: h["__metadata__"].__setitem__("tensors_sha256", "0" * 64))
    moment = next(n for n in names if n.startswith("adam_m."))
    edit("moment without twin", lambda h: h.pop(moment.replace("adam_m.", "adam_v.")))
    out.append(("header a list", struct.pack("<Q", 2) + b"[]" + data))
    out.append(("header not UTF-8", struct.pack("<Q", 4) + b"\xff\xfe{}" + data))
    out.append(("header length past the end", struct.pack("<Q", len(data) + 10**6) + b"{}"))
    out.append(("header length 2**63", struct.pack("<Q", 1 << 63) + b"{}"))
    out.append(("empty file", b""))
    out.append(("7 bytes", b"\x01" * 7))
    return out


def _corruptions(blob: bytes, rng: np.random.Generator) -> list[tuple[str, bytes]]:
    header, data = _split(blob)
    cases = _structured_lies(header, data)
    for k in rng.choice(len(blob), size=120, replace=False):
        cases.append((f"truncated to {k}", blob[:k]))
    n_header = 8 + struct.unpack("<Q", blob[:8])[0]
    for _ in range(250):
        b = bytearray(blob)
        at = int(rng.integers(0, len(b)))
        b[at] ^= 1 << int(rng.integers(0, 8))
        cases.append((f"bit flipped at {at} ({'header' if at < n_header else 'data'})", bytes(b)))
    for _ in range(30):
        cases.append(("random bytes", rng.integers(0, 256, int(rng.integers(0, 400)), dtype=np.uint8).tobytes()))
    return cases


def _same(a, b) -> bool:
    return (
        a.step == b.step
        and a.metadata == b.metadata
        and all(
            set(x) == set(y) and all(np.array_equal(x[k], y[k]) for k in x)
            for x, y in ((a.params, b.params), (a.adam_m, b.adam_m), (a.adam_v, b.adam_v))
        )
    )


def test_corrupted_checkpoints_are_refused_by_every_reader_and_change_no_session(tmp_path):
    good = tmp_path / "good.safetensors"
    session = _trained(good)
    original = load_checkpoint(good)
    snapshot = {n: session.read_param(n) for n in session.parameter_names()}
    rng = np.random.default_rng(0)
    cases = _corruptions(good.read_bytes(), rng)
    refused = 0
    path = tmp_path / "bad.safetensors"
    for label, blob in cases:
        path.write_bytes(blob)
        try:
            got = load_checkpoint(path)
        except ValueError as e:
            refused += 1
            assert str(path) in str(e), f"{label}: the error does not name the file: {e}"
        else:  # a flip that changed nothing the format cares about (e.g. JSON whitespace)
            assert _same(got, original), f"{label}: loaded different content without an error"
        for reader in (read_safetensors, checkpoint_shapes, read_header):
            try:
                reader(path)
            except ValueError as e:
                assert str(path) in str(e), f"{label}: {reader.__name__} error does not name the file: {e}"
        try:
            session.load_checkpoint(path)
        except ValueError:
            now = {n: session.read_param(n) for n in session.parameter_names()}
            assert all(np.array_equal(now[n], snapshot[n]) for n in now), f"{label}: a refused load changed the session"
            assert session.optimizer_step == 3
    assert len(cases) >= 400 and refused >= 0.9 * len(cases)
    print(f"checkpoint fuzz: {len(cases)} corrupted files, {refused} refused with a ValueError, the rest loaded intact; 0 crashes")


def test_structured_header_errors_name_the_file_and_the_tensor(tmp_path):
    good = tmp_path / "good.safetensors"
    _trained(good)
    header, data = _split(good.read_bytes())
    for label, blob in _structured_lies(header, data):
        path = tmp_path / "lie.safetensors"
        path.write_bytes(blob)
        with pytest.raises(ValueError) as info:
            load_checkpoint(path)
        msg = str(info.value)
        assert str(path) in msg, (label, msg)
        if label.startswith(("dtype", "shape", "offsets", "entry")):
            assert any(f"'{n}'" in msg for n in header if n != "__metadata__"), (label, msg)


def test_negative_or_malformed_step_in_metadata_is_refused(tmp_path):
    path = tmp_path / "c.safetensors"
    good = tmp_path / "good.safetensors"
    _trained(good)
    header, data = _split(good.read_bytes())
    header["__metadata__"]["step"] = "-3"
    path.write_bytes(_join(header, data))
    with pytest.raises(SafetensorsError, match=r"'step' must be a non-negative integer, got '-3'"):
        load_checkpoint(path)
    with pytest.raises(ValueError, match="step must be a non-negative int"):
        save_checkpoint(path, Checkpoint({"w": np.zeros(2)}, step=-1))


def test_modified_tensor_data_fails_the_checksum(tmp_path):
    path = tmp_path / "c.safetensors"
    _trained(path)
    blob = bytearray(path.read_bytes())
    blob[-3] ^= 0x10  # one bit of the last tensor
    path.write_bytes(bytes(blob))
    with pytest.raises(SafetensorsError, match="does not match the checksum"):
        load_checkpoint(path)


def test_a_refused_load_leaves_the_session_as_it_was(tmp_path):
    """A file whose first tensors are fine and whose last is of the wrong dtype: nothing is written."""
    good = tmp_path / "good.safetensors"
    _trained(good)
    fresh = build_session(mlp(), optimizer="adam", seed=7)
    before = {n: fresh.read_param(n) for n in fresh.parameter_names()}
    header, data = _split(good.read_bytes())
    last = sorted(k for k in header if k != "__metadata__")[-1]
    header[last]["dtype"] = "I32"  # same size: the header is valid, the checkpoint is not
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(_join(header, data))
    with pytest.raises(SafetensorsError, match=f"tensor '{last}' is I32"):
        fresh.load_checkpoint(bad)
    assert all(np.array_equal(fresh.read_param(n), before[n]) for n in before) and fresh.optimizer_step == 0


def test_a_failed_save_leaves_no_temp_file_and_the_old_checkpoint(tmp_path, monkeypatch):
    path = tmp_path / "c.safetensors"
    save_checkpoint(path, Checkpoint({"w": np.ones(3)}, step=1))

    def broken_replace(src, dst):
        raise OSError("disk full (simulated)")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="simulated"):
        save_checkpoint(path, Checkpoint({"w": np.zeros(3)}, step=2))
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.safetensors"]
    assert load_checkpoint(path).step == 1


def test_temp_files_of_killed_writers_are_removed_by_the_next_save(tmp_path):
    path = tmp_path / "c.safetensors"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True).stdout.strip()
    stale = tmp_path / f".c.safetensors.{dead}.x1y2z3.tmp"
    alive = tmp_path / f".c.safetensors.{os.getppid()}.a1b2c3.tmp"  # a live writer's file stays
    other = tmp_path / f".other.safetensors.{dead}.q1w2e3.tmp"  # another target's file stays
    for p in (stale, alive, other):
        p.write_bytes(b"partial")
    save_checkpoint(path, Checkpoint({"w": np.ones(3)}, step=1))
    assert not stale.exists() and alive.exists() and other.exists()
    assert load_checkpoint(path).step == 1


def test_checkpoints_record_a_checksum_and_meganeura_files_without_one_still_load(tmp_path):
    path = tmp_path / "c.safetensors"
    save_checkpoint(path, Checkpoint({"w": np.arange(3.0)}, step=4))
    meta = read_header(path).metadata
    signed = {k: v for k, v in meta.items() if k != "tensors_sha256"}
    assert signed == {"format": "meganeura-checkpoint-2", "step": "4"}
    assert meta["tensors_sha256"] == checkpoint_module.tensors_sha256({"w": np.arange(3.0, dtype=np.float32)}, signed)
    from safetensors.numpy import save_file

    save_file({"w": np.arange(3.0, dtype=np.float32)}, str(path), metadata={"step": "4"})
    c = load_checkpoint(path)
    assert c.step == 4 and np.array_equal(c.params["w"], np.arange(3.0))


def test_malformed_onnxruntime_training_checkpoints_are_refused_naming_the_file(tmp_path):
    from meganeura_onnx.runtime.ort_checkpoint import OrtCheckpoint, read_ort_checkpoint, write_ort_checkpoint

    good = tmp_path / "good.ckpt"
    w = np.arange(6, dtype=np.float32).reshape(2, 3)
    write_ort_checkpoint(good, OrtCheckpoint({"w": w}, {"w": (w + 1, w + 2)}, step=5, learning_rate=0.1, has_optimizer_group=True))
    back = read_ort_checkpoint(good)
    assert back.step == 5 and np.array_equal(back.parameters["w"], w) and np.array_equal(back.moments["w"][1], w + 2)
    blob = good.read_bytes()
    rng = np.random.default_rng(0)
    bad = tmp_path / "bad.ckpt"
    cases = [blob[:k] for k in rng.choice(len(blob), 60, replace=False)]
    for _ in range(150):
        b = bytearray(blob)
        b[int(rng.integers(8, len(b)))] ^= 1 << int(rng.integers(0, 8))
        cases.append(bytes(b))
    for blob_case in cases:
        bad.write_bytes(blob_case)
        try:
            read_ort_checkpoint(bad)
        except ValueError as e:
            assert str(bad) in str(e)
