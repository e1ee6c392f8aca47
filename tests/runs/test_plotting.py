"""Learning-curve figures: readable axes, only panels with data, labelled runs."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib.pyplot as plt
import pytest

from pathgrad.runs.plotting import learning_curve_figure, plot_runs, run_label


def write_run(folder: Path, *, evaluations: bool, seed: int = 0, env: str = "Pendulum") -> Path:
    folder.mkdir(parents=True)
    lines = []
    for update in range(1, 41):
        step = update * 64 * 32
        lines.append(
            {
                "kind": "train",
                "global_step": step,
                "num_updates": update,
                "time": update * 0.5,
                "charts/episode_reward_avg_100": -100.0 + update,
            }
        )
        if evaluations and update % 10 == 0:
            lines.append({"kind": "eval", "global_step": step, "time": update * 0.5,
                          "eval/avg_reward": -50.0 + update,
                          "eval/forward_velocity": 0.01 * update})  # fmt: skip
    (folder / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    (folder / "config.yaml").write_text(
        f"env:\n  name: {env}\nalgorithm:\n  name: shac\ntrainer:\n  seed: {seed}\n"
    )
    return folder


def test_runs_without_evaluation_get_no_empty_panel(tmp_path):
    run = write_run(tmp_path / "a", evaluations=False)
    figure = learning_curve_figure([run])
    assert len(figure.axes) == 2
    assert {axis.get_ylabel() for axis in figure.axes} == {"training return (last 100 episodes)"}
    plt.close(figure)
    both = learning_curve_figure([run, write_run(tmp_path / "b", evaluations=True)])
    assert len(both.axes) == 4
    plt.close(both)


def test_env_step_ticks_are_short_and_runs_are_labelled(tmp_path):
    runs = [
        write_run(tmp_path / "x" / "run", evaluations=True, seed=0),
        write_run(tmp_path / "y" / "run", evaluations=True, seed=1),
    ]
    figure = learning_curve_figure(runs)
    figure.canvas.draw()
    steps_axis = figure.axes[0]
    labels = [tick.get_text() for tick in steps_axis.get_xticklabels() if tick.get_text()]
    assert labels and all(len(text) <= 5 for text in labels), labels  # e.g. 800k, 1.2M
    assert any(text.endswith("k") or text.endswith("M") for text in labels), labels
    legend = [text.get_text() for text in steps_axis.get_legend().get_texts()]
    assert legend == ["x/run (Pendulum, shac, seed 0)", "y/run (Pendulum, shac, seed 1)"]
    plt.close(figure)
    assert run_label(tmp_path / "nowhere") == "nowhere"


def test_evaluation_metrics_get_their_own_row_and_unknown_ones_are_named(tmp_path):
    run = write_run(tmp_path / "a", evaluations=True)
    figure = learning_curve_figure([run], ["forward_velocity"])
    assert len(figure.axes) == 6
    speed = figure.axes[4]
    assert speed.get_ylabel() == "evaluation forward velocity"
    assert list(speed.lines[0].get_ydata()) == pytest.approx([0.1, 0.2, 0.3, 0.4])
    plt.close(figure)
    with pytest.raises(ValueError, match="no run has the evaluation metric 'eval/speed'; "
                       "they have: eval/avg_reward, eval/forward_velocity"):  # fmt: skip
        learning_curve_figure([run], ["eval/speed"])


def test_a_cut_last_line_is_skipped_and_a_bad_line_named(tmp_path):
    run = write_run(tmp_path / "a", evaluations=True)
    with open(run / "metrics.jsonl", "a") as handle:
        handle.write('{"kind": "train", "global_st')  # a crash mid-write
    path = plot_runs([run], tmp_path / "out.png")
    assert path.read_bytes()[:4] == b"\x89PNG"
    lines = (run / "metrics.jsonl").read_text().splitlines()
    lines.insert(3, "garbage")
    (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match="line 4 is not a JSON object"):
        plot_runs([run], tmp_path / "out.png")
    lines[3] = '{"kind": "train", "note": "\xff"}'  # a byte no UTF-8 text has, in a string
    (run / "metrics.jsonl").write_bytes("\n".join(lines).encode("latin-1") + b"\n")
    with pytest.raises(ValueError, match=r"line 4 is not UTF-8 text \(byte 0xff at column 28\)"):
        plot_runs([run], tmp_path / "out.png")
    with pytest.raises(FileNotFoundError, match="'.*nowhere' does not exist"):
        plot_runs([tmp_path / "nowhere"], tmp_path / "out.png")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="'.*empty' has no metrics.jsonl to plot.$"):
        plot_runs([tmp_path / "empty"], tmp_path / "out.png")


def test_gradient_health_gets_log_scaled_rows_with_skipped_updates_marked(tmp_path):
    run = write_run(tmp_path / "a", evaluations=False)
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    for line in lines:
        update = line["num_updates"]
        skipped = update in (7, 30)
        line.update({"train/grad_norm": None if skipped else 10.0 ** (update % 4),
                     "train/skipped_update": float(skipped),
                     "train/action_adjoint_preclip_max_norm": 0.5 * update})  # fmt: skip
    (run / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    figure = learning_curve_figure([run])
    rows = [axis.get_ylabel() for axis in figure.axes[::2]]
    assert rows == [
        "training return (last 100 episodes)",
        "gradient norm before clipping (x: skipped update)",
        "largest action-adjoint norm",
    ]
    gradient_axis = figure.axes[2]
    assert gradient_axis.get_yscale() == "log" and figure.axes[4].get_yscale() == "log"
    norm_line, skipped_marks = gradient_axis.get_lines()
    assert len(norm_line.get_xdata()) == 38  # skipped updates have no norm
    assert list(skipped_marks.get_xdata()) == [7 * 64 * 32, 30 * 64 * 32]
    plt.close(figure)


@pytest.mark.parametrize(("x", "label"), [("steps", "env steps"), ("time", "wall time (s)")])
def test_one_x_axis_on_request(tmp_path, x, label):
    run = write_run(tmp_path / "a", evaluations=True)
    figure = learning_curve_figure([run], x=x)
    assert len(figure.axes) == 2  # evaluation and training return, one column
    assert {axis.get_xlabel() for axis in figure.axes} == {label}
    lines = [line for line in figure.axes[0].get_lines() if len(line.get_xdata()) > 1]
    assert max(lines[0].get_xdata()) == (20.0 if x == "time" else 40 * 64 * 32)
    plt.close(figure)
    with pytest.raises(ValueError, match="x must be one of steps, time, got 'seconds'"):
        learning_curve_figure([run], x="seconds")
