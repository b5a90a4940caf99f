"""``benchmarks/run_info.py``: the digests that name the code and kernel libraries a benchmark ran,
where a copy's git metadata may be older than its files."""

from __future__ import annotations

import hashlib
import importlib.util
from pathlib import Path

from meganeura_onnx import custom_op_library

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("run_info", ROOT / "benchmarks" / "run_info.py")
run_info = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(run_info)


def _tree(tmp_path: Path) -> Path:
    (tmp_path / "meganeura_onnx" / "ops").mkdir(parents=True)
    (tmp_path / "models").mkdir()
    (tmp_path / "meganeura_onnx" / "ops" / "a.py").write_text("x = 1\n")
    (tmp_path / "models" / "m.py").write_text("y = 2\n")
    (tmp_path / "notes.txt").write_text("not a source\n")
    return tmp_path


def test_the_source_digest_changes_with_a_source_and_not_with_other_files(tmp_path):
    root = _tree(tmp_path)
    first = run_info.source_digest(root)
    assert len(first) == 64 and first == run_info.source_digest(root)
    (root / "notes.txt").write_text("edited\n")
    assert run_info.source_digest(root) == first
    (root / "meganeura_onnx" / "ops" / "a.py").write_text("x = 3\n")
    assert run_info.source_digest(root) != first


def test_the_source_digest_tells_a_renamed_file_apart(tmp_path):
    root = _tree(tmp_path)
    first = run_info.source_digest(root)
    (root / "models" / "m.py").rename(root / "models" / "n.py")
    assert run_info.source_digest(root) != first


def test_kernel_libraries_name_each_built_library_by_its_sha256():
    found = run_info.kernel_libraries()
    for device in ("cpu", "cuda"):
        path = custom_op_library(device)
        if path is None:
            assert device not in found
            continue
        assert found[device]["path"] == path
        assert found[device]["sha256"] == hashlib.sha256(Path(path).read_bytes()).hexdigest()
