"""Session feedback (an output fed back into an input on the device) and the index ops it is made for."""

from __future__ import annotations

import numpy as np
import pytest

from meganeura_onnx import Graph, build_inference_session


def _counter_graph() -> Graph:
    """ids U32 [2] -> next = ids + 3; scores F32 [2, 5] -> best = argmax(scores) (U32 [2])."""
    g = Graph()
    ids = g.input_u32("ids", [2])
    scores = g.input("scores", [2, 5])
    g.set_outputs({"next": g.add_u32(ids, 3), "best": g.argmax(scores)})
    return g


def test_feedback_output_becomes_the_input_of_the_next_step():
    s = build_inference_session(_counter_graph(), feedback={"ids": "next"})
    s.set_input_u32("ids", [10, 20])
    for k in range(1, 5):
        s.step()
        np.testing.assert_array_equal(s.read_output("next"), [10 + 3 * k, 20 + 3 * k])
    s.set_input_u32("ids", [1, 2])  # an upload overwrites the fed-back value
    s.step()
    np.testing.assert_array_equal(s.read_output("next"), [4, 5])


def test_feedback_session_keeps_its_other_inputs_and_outputs():
    s = build_inference_session(_counter_graph(), feedback={"ids": "next"})
    scores = np.array([[0, 5, 1, 5, -1], [-3, -2, -9, -2.5, -8]], np.float32)
    s.set_input("scores", scores)
    s.step()
    np.testing.assert_array_equal(s.read_output("best"), np.argmax(scores, axis=-1))  # first index on ties
    assert s.read_output("best").dtype == np.uint32


def test_add_u32_wraps_modulo_2_to_the_32():
    g = Graph()
    x = g.input_u32("x", [3])
    g.set_outputs({"y": g.add_u32(x, (1 << 32) - 1)})
    s = build_inference_session(g)
    s.set_input_u32("x", [0, 1, (1 << 32) - 1])
    s.step()
    np.testing.assert_array_equal(s.read_output("y"), np.array([(1 << 32) - 1, 0, (1 << 32) - 2], np.uint32))


def test_argmax_of_a_vector_is_one_index():
    g = Graph()
    g.set_outputs({"i": g.argmax(g.input("v", [6]))})
    s = build_inference_session(g)
    s.set_input("v", [0, -1, 7, 7, 2, 1])
    s.step()
    np.testing.assert_array_equal(s.read_output("i"), [2])


@pytest.mark.parametrize(
    "feedback, message",
    [
        ({"nope": "next"}, "'nope' is not an input of the graph"),
        ({"ids": "nope"}, "'nope' is not an output of the graph"),
        ({"scores": "next"}, "the input is F32 [2, 5], the output U32 [2]"),
    ],
)
def test_feedback_errors_name_the_input_and_output(feedback, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        build_inference_session(_counter_graph(), feedback=feedback)


def test_feedback_takes_any_output_of_the_inputs_type():
    s = build_inference_session(_counter_graph(), feedback={"ids": "best"})  # both U32 [2]
    s.set_input("scores", np.eye(2, 5, 3, dtype=np.float32))
    s.step()
    np.testing.assert_array_equal(s.read_output("best"), [3, 4])
    s.step()  # ids is now [3, 4]: next = ids + 3
    np.testing.assert_array_equal(s.read_output("next"), [6, 7])


def test_feedback_must_be_a_mapping():
    with pytest.raises(TypeError, match="feedback must be a dict"):
        build_inference_session(_counter_graph(), feedback=[("ids", "next")])


def test_steps_runs_count_steps_like_step():
    s = build_inference_session(_counter_graph(), feedback={"ids": "next"})
    s.set_input_u32("ids", [1, 2])
    s.steps(5)
    np.testing.assert_array_equal(s.read_output("next"), [16, 17])
    for bad in (0, -1, 2.0, True):
        with pytest.raises(ValueError, match="count must be a positive int"):
            s.steps(bad)
