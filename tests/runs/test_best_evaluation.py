"""``summary.json``'s best evaluation: the best line of ``metrics.jsonl``, its env steps and
wall time (the clock resumes continue), whatever else the file holds."""

from __future__ import annotations

import json

from pathgrad.runs.run import best_evaluation


def write(tmp_path, lines: list) -> None:
    text = "".join(line if isinstance(line, str) else json.dumps(line) + "\n" for line in lines)
    (tmp_path / "metrics.jsonl").write_text(text)


def test_the_best_of_the_evaluations_with_its_steps_and_time(tmp_path):
    write(tmp_path, [
        {"kind": "train", "global_step": 100, "time": 1.0, "eval/avg_reward": 99.0},
        {"kind": "eval", "global_step": 100, "time": 2.0, "eval/avg_reward": 5.0},
        {"kind": "eval", "global_step": 200, "time": 4.0, "eval/avg_reward": 7.0},
        {"kind": "eval", "global_step": 300, "time": 6.0, "eval/avg_reward": 7.0},  # a tie
        {"kind": "eval", "global_step": 400, "time": 8.0, "eval/avg_reward": 6.0},
    ])  # fmt: skip
    assert best_evaluation(tmp_path, "eval/avg_reward", "max") == {
        "metric": "eval/avg_reward", "value": 7.0, "global_step": 200, "time": 4.0}  # fmt: skip
    assert best_evaluation(tmp_path, "eval/avg_reward", "min")["global_step"] == 100


def test_none_before_any_evaluation_and_bad_lines_are_passed_over(tmp_path):
    assert best_evaluation(tmp_path, "eval/avg_reward", "max") is None  # no file
    write(tmp_path, [{"kind": "train", "global_step": 1, "time": 1.0}])
    assert best_evaluation(tmp_path, "eval/avg_reward", "max") is None
    write(tmp_path, [
        "not json\n",
        {"kind": "eval", "global_step": 1, "time": 1.0, "eval/avg_reward": None},
        {"kind": "eval", "global_step": 2, "time": 2.0, "eval/avg_reward": 3.0},
        '{"kind": "eval", "global_step": 3, "time": 3.0, "eval/avg_rew',  # cut by a crash
    ])  # fmt: skip
    assert best_evaluation(tmp_path, "eval/avg_reward", "max")["global_step"] == 2
