"""A CPU session's parameters in one huge-page-advised block (runtime/host_block.py): the copies hold
the values, are 64-byte aligned and independent of the given arrays; a session's weights live there,
and set_parameter / share_buffers keep working on them."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from meganeura_onnx import Graph, build_inference_session
from meganeura_onnx.runtime.host_block import ALIGN, huge_page_copies


def address(arr: np.ndarray) -> int:
    return arr.__array_interface__["data"][0]


def advised_for_huge_pages(addr: int) -> bool:
    """Whether /proc/self/smaps lists the mapping holding ``addr`` with the ``hg`` (MADV_HUGEPAGE) flag."""
    inside = False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()[0]
            if "-" in head and all(c in "0123456789abcdef-" for c in head):
                lo, hi = (int(x, 16) for x in head.split("-"))
                inside = lo <= addr < hi
            elif inside and line.startswith("VmFlags:"):
                return "hg" in line.split()[1:]
    return False


def test_copies_hold_the_values_aligned_and_independent_of_the_inputs():
    rng = np.random.default_rng(0)
    given = {
        "a": rng.standard_normal((3, 5)).astype(np.float32),
        "empty": np.zeros((0, 4), np.float32),
        "b": np.arange(7, dtype=np.float32),
    }
    got = huge_page_copies(given)
    assert list(got) == list(given)
    for name, arr in given.items():
        assert got[name].shape == arr.shape and got[name].dtype == arr.dtype and got[name].flags.c_contiguous
        np.testing.assert_array_equal(got[name], arr)
        assert address(got[name]) % ALIGN == 0 or arr.size == 0
    got["a"][0, 0] = 42.0
    assert given["a"][0, 0] != 42.0 and got["b"][0] == 0.0  # a copy, and no overlap with its neighbour


def test_copies_of_fortran_ordered_arrays_are_c_ordered():
    arr = np.asfortranarray(np.arange(12, dtype=np.float32).reshape(3, 4))
    got = huge_page_copies({"w": arr})["w"]
    assert got.flags.c_contiguous
    np.testing.assert_array_equal(got, arr)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="MADV_HUGEPAGE and /proc/self/smaps are Linux's")
def test_cpu_session_weights_share_one_advised_block_and_take_set_parameter():
    g = Graph()
    x = g.input("x", [2, 8])
    w1 = g.parameter("w1", [8, 16])
    w2 = g.parameter("w2", [16, 4])
    g.set_outputs([g.matmul(g.matmul(x, w1), w2)])
    rng = np.random.default_rng(1)
    params = {"w1": rng.standard_normal((8, 16)).astype(np.float32), "w2": rng.standard_normal((16, 4)).astype(np.float32)}
    s = build_inference_session(g, "cpu", parameters=params)
    ptrs = [s._values[n].data_ptr() for n in ("w1", "w2")]
    assert all(p % ALIGN == 0 for p in ptrs) and abs(ptrs[1] - ptrs[0]) < 4096  # side by side in one block
    assert advised_for_huge_pages(ptrs[0])
    xv = rng.standard_normal((2, 8)).astype(np.float32)
    s.set_input("x", xv)
    s.step()
    np.testing.assert_allclose(s.read_output_by_index(0), xv @ params["w1"] @ params["w2"], rtol=1e-5, atol=1e-5)
    s.set_parameter("w2", np.ones((16, 4), np.float32))
    s.step()
    np.testing.assert_allclose(s.read_output_by_index(0), xv @ params["w1"] @ np.ones((16, 4)), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(s.read_param("w1"), params["w1"])
