"""The example and benchmark scripts keep working (short runs)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

import warm_processes

ROOT = Path(__file__).resolve().parent.parent


def run_script(*args: str, cwd: Path) -> str:
    """``python SCRIPT ARGS`` in a process of its own (tests/warm_processes.py); its stdout."""
    result = warm_processes.run([sys.executable, *args], cwd=cwd)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_point_mass_example_trains_and_writes_a_run(tmp_path):
    run_dir = tmp_path / "run"
    output = run_script(
        str(ROOT / "examples" / "train_point_mass.py"),
        "--updates",
        "5",
        "--run-dir",
        str(run_dir),
        cwd=tmp_path,
    )
    assert "PointMass: 5 updates" in output
    assert (run_dir / "tb").is_dir() and (run_dir / "checkpoints" / "index.json").is_file()


def test_example_refuses_to_overwrite_a_run(tmp_path):
    script = str(ROOT / "examples" / "train_point_mass.py")
    result = warm_processes.run([sys.executable, script, "--run-dir", str(tmp_path)])
    assert result.returncode != 0 and "exists" in result.stderr


@pytest.mark.slow
def test_side_by_side_benchmark_quick_mode_prints_every_contender(tmp_path):
    output = run_script(
        str(ROOT / "benchmarks" / "side_by_side.py"),
        *("--quick", "--no-brax", "--chunk-steps", "2", "--plot", str(tmp_path / "plot.png")),
        cwd=tmp_path,
    )
    header = (
        "| envs | minimal PyTorch loop | hand-written loop on pathgrad's env and policy "
        "| pathgrad eager | pathgrad compiled rollout | pathgrad compiled update |"
    )
    assert header in output and "\n| 16 | " in output
    assert "torch.compile update, 16 envs, 2-step chunks: " in output
    assert (tmp_path / "plot.png").stat().st_size > 10_000


@pytest.mark.slow
def test_overhead_benchmark_quick_mode_prints_the_ratio(tmp_path):
    output = run_script(
        str(ROOT / "benchmarks" / "overhead.py"),
        *("--quick", "--compile", "--chunk-steps", "2"),
        cwd=tmp_path,
    )
    header = "| algorithm | envs | hand-written | pathgrad | compiled update (chunk 2) |"
    assert header in output
    assert "\n| APG | 16 | " in output and "compile apg update, 16 envs, chunk 2: " in output


def test_overhead_benchmark_compares_thread_counts(tmp_path):
    output = run_script(
        str(ROOT / "benchmarks" / "overhead.py"),
        *("--quick", "--compare-threads", "1", "2"),
        cwd=tmp_path,
    )
    assert "threads 1 vs 2" in output and "| envs | 1 threads | 2 threads |" in output
    row = next(line for line in output.splitlines() if line.startswith("| APG | 16 | "))
    assert "(1.000)" in row and float(row.rsplit("(", 1)[1].split(")")[0]) > 0


def test_the_python_api_pages_object_example_runs(tmp_path):
    page = (ROOT / "docs" / "python_api.md").read_text()
    code = page.split("```python\n", 1)[1].split("```", 1)[0]
    script = tmp_path / "readme_example.py"
    script.write_text(code)
    output = run_script(str(script), cwd=tmp_path)
    assert float(output.strip().splitlines()[-1]) < 0  # a finite average episode return
    assert (tmp_path / "runs" / "demo" / "checkpoints" / "index.json").is_file()


def test_custom_env_example_checks_gradients_and_learns(tmp_path):
    output = run_script(str(ROOT / "examples" / "custom_env.py"), "--updates", "60", cwd=tmp_path)
    assert "gradients agree with finite differences" in output
    before, after = output.split("final error ")[1].split(" m")[0].split(" -> ")
    assert float(after) < float(before)
    assert list(tmp_path.iterdir()) == []  # the example writes nothing


def test_env_benchmark_quick_mode_lists_every_env(tmp_path):
    output = run_script(str(ROOT / "benchmarks" / "envs.py"), "--quick", cwd=tmp_path)
    for name in ("PointMass", "Pendulum", "MountainCarContinuous", "CartPoleSwingUp", "Reacher"):
        assert f"| {name} | 8 |" in output


def test_shac_vs_apg_benchmark_quick_mode_writes_results_and_plots(tmp_path):
    output = run_script(
        str(ROOT / "benchmarks" / "shac_vs_apg.py"),
        "--quick",
        "--out",
        str(tmp_path / "out"),
        cwd=tmp_path,
    )
    assert "| Pendulum | APG | 1 |" in output and "| Pendulum | SHAC | 1 |" in output
    assert (tmp_path / "out" / "Pendulum.png").read_bytes()[:4] == b"\x89PNG"
    assert len(json.loads((tmp_path / "out" / "results.json").read_text())) == 2


def test_memory_benchmark_quick_mode_prints_every_setting(tmp_path):
    output = run_script(str(ROOT / "benchmarks" / "memory.py"), "--quick", cwd=tmp_path)
    assert "| horizon | segmented | complete | checkpointed |" in output
    assert output.count("\n| 32 |") == 1


def test_baselines_benchmark_quick_mode_covers_every_method(tmp_path):
    output = run_script(
        str(ROOT / "benchmarks" / "baselines.py"),
        "--quick",
        "--jobs",
        "1",
        "--out",
        str(tmp_path / "out"),
        "--set",
        "env.num_envs=8",
        "--label",
        "8 envs",
        cwd=tmp_path,
    )
    for method in ("APG", "SHAC", "SAPO", "AHAC"):  # --set and --label: first-order runs only
        assert f"| Pendulum | {method} (8 envs) |" in output
    for method in ("PPO", "SAC"):
        assert f"| Pendulum | {method} |" in output
    assert (tmp_path / "out" / "Pendulum.png").is_file()
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    for run in results:
        if run["method"] not in ("ppo", "sac"):  # two updates of 8 envs, not 64
            assert 0 < run["curve"][-1][0] <= 2 * 8 * 64, run["method"]


@pytest.mark.parametrize(
    "arguments, message",
    [
        *[([option, "0"], f"{option} must be positive, got 0")
          for option in ("--ppo-steps", "--sac-steps", "--baseline-eval-steps")],
        (["--tasks", "Pendulum", "--set", "env.num_envs=0"], "--set with Pendulum apg: env."),
        (["--tasks", "Pendulum", "--methods", "trpo"], "argument --methods: invalid choice"),
    ],
)  # fmt: skip
def test_baselines_benchmark_rejects_bad_arguments_before_any_run(tmp_path, arguments, message):
    result = warm_processes.run(
        [sys.executable, str(ROOT / "benchmarks" / "baselines.py"), *arguments], cwd=tmp_path
    )
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert not (tmp_path / "baseline_results").exists()


def test_side_by_side_names_one_compiled_update_per_chunk_size():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import side_by_side
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))

    names = list(side_by_side.torch_contenders([8, 32]))
    assert names[-3:] == [
        "pathgrad compiled rollout",
        "pathgrad compiled update (8-step chunks)",
        "pathgrad compiled update (32-step chunks)",
    ]
    assert list(side_by_side.torch_contenders([8]))[-1] == "pathgrad compiled update"


def test_side_by_side_alternates_brax_with_the_torch_runs(monkeypatch):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import overhead
        import side_by_side
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))

    calls = []

    def fake_brax(num_envs, updates, epochs):
        calls.append("brax")
        return 1000.0 * calls.count("brax"), 2.5  # env-steps/s, JIT seconds

    def torch_run(num_envs, window, updates, seed):
        calls.append(f"torch {updates}")
        return 1.0

    monkeypatch.setattr(side_by_side, "brax_apg", fake_brax)
    jit_seconds = {}
    contenders = {
        "torch": torch_run,
        "brax": side_by_side.brax_contender(300, 2, jit_seconds),
    }
    rates = overhead.median_rates(contenders, 4, 8, 10, 3, 0, warm_up=["torch"])
    # one warm-up of the torch contender only, then the two alternate
    assert calls == ["torch 1", "torch 10", "brax", "torch 10", "brax", "torch 10", "brax"]
    assert rates["torch"] == 4 * 8 * 10
    assert rates["brax"] == pytest.approx(2000.0)  # the median of Brax's rates 1000, 2000, 3000
    assert jit_seconds == {4: 2.5}


def test_baselines_summary_counts_a_seed_that_never_reached_the_mark_as_the_slowest():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import baselines
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))

    def run(seed: int, curve: list[list[float]], label: str = "") -> dict:
        return {"task": "Pendulum", "method": "apg", "label": label, "seed": seed,
                "curve": curve, "wall_time": 10.0}  # fmt: skip

    last_points = {0: [1000.0, 2.0, -4.0], 1: [3000.0, 2.0, -4.0], 2: [4000.0, 2.0, -6.0]}
    results = [run(seed, [[500.0, 1.0, -9.0], last_points[seed]]) for seed in range(3)]
    few = [[100.0, 0.5, -9.0], [200.0, 1.0, -6.0]]  # never reaches -5
    results += [run(seed, few, " (few envs)") for seed in range(3)]
    table = baselines.summarize(results, {"Pendulum": -5.0})
    rows = {line.split(" | ")[1]: line for line in table.splitlines()[2:]}
    assert "| 3k (2/3) | 2 s (2/3) |" in rows["APG"]  # the median of 1k, 3k and never
    assert "not reached (0/3)" in rows["APG (few envs)"]
    assert "| -5.0 |" in rows["target (given)"]


def test_newton_ant_gradient_benchmark_quick_mode_prints_its_tables(tmp_path):
    pytest.importorskip("newton")
    output = run_script(
        str(ROOT / "benchmarks" / "newton_ant_gradients.py"), "--quick", cwd=tmp_path
    )
    per_step = output.split("| tuned (damping 30) | ")[1].split(" ")[0]
    assert float(per_step) < 0.03  # actions: one step through contact agrees
    assert "| 2 |" in output.split("growth over a window")[1]


def test_rigid_id_adjoint_benchmark_times_both_kernels_for_every_robot(tmp_path):
    pytest.importorskip("newton")
    output = run_script(
        str(ROOT / "benchmarks" / "rigid_id_adjoint.py"), "--num-envs", "2", "--repeats", "1",
        cwd=tmp_path,
    )  # fmt: skip
    rows = {line.split(" | ")[0].strip("| "): line for line in output.splitlines()}
    for robot in ("DiffRLAnt", "DiffRLHopper", "DiffRLHalfCheetah", "DiffRLHumanoid"):
        cells = [float(cell) for cell in rows[robot].strip(" |").split(" | ")[1:]]
        assert len(cells) == 5 and all(cell > 0 for cell in cells), rows[robot]


def test_newton_bridge_benchmark_quick_mode_compares_against_the_torch_cartpole(tmp_path):
    pytest.importorskip("newton")
    output = run_script(str(ROOT / "benchmarks" / "newton_bridge.py"), "--quick", cwd=tmp_path)
    rows = {line.split(" | ")[0].strip("| "): line for line in output.splitlines()}
    assert rows["CartPoleSwingUp (torch)"].rstrip().endswith("| 1.00 |")
    for name in ("NewtonCartPoleSwingUp, captured", "NewtonCartPoleSwingUp, launched"):
        ratio = float(rows[name].rstrip(" |").rsplit("|", 1)[1])
        assert ratio > 0  # a measured rate, not an empty cell


def test_the_python_api_pages_one_call_example_runs(tmp_path):
    page = (ROOT / "docs" / "python_api.md").read_text()
    section = page.split("## One call: `pathgrad.train` and `pathgrad.load`", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    (tmp_path / "configs").symlink_to(ROOT / "configs")
    script = tmp_path / "one_call.py"
    script.write_text(code)
    output = run_script(str(script), cwd=tmp_path).strip().splitlines()
    assert output[-2].startswith("completed ") and "runs/pendulum-" in output[-2]
    assert output[-1].startswith("[") and len(output[-1].strip("[]").split()) == 1  # one action


def test_the_bench_extra_provides_brax_apg():
    """With ``pip install -e '.[bench]'`` (its pinned versions), Brax's APG trainer imports."""
    pytest.importorskip("brax", reason="the bench extra is not installed")
    from brax.training.agents.apg import train

    assert callable(train)


def test_the_gpu_check_dry_run_reports_every_section(tmp_path):
    """``benchmarks/gpu_check.py --dry-run``: what a GPU machine would run, small, on the CPU."""
    pytest.importorskip("newton")
    output = run_script(str(ROOT / "benchmarks" / "gpu_check.py"), str(tmp_path), "--dry-run",
                        cwd=tmp_path)  # fmt: skip
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    assert (tmp_path / "gpu_check.md").read_text() in output
    assert report["dry_run"] and len(report["tests"]) >= 14
    if not torch.cuda.is_available():
        assert {row["message"] for row in report["tests"]} == {"skipped: no CUDA"}
    eager = [row for row in report["apg"] if row["mode"] == "eager"]
    assert {row["env"] for row in eager} == {"PointMass", "Pendulum"}
    assert all(row["status"] == "ok" and row["env_steps_per_s"] > 0 for row in eager)
    (ant,) = report["ant"]
    assert ant["status"] == "ok" and ant["shac_status"] == "ok", ant
    assert ant["forward_env_steps_per_s"] > ant["forward_backward_env_steps_per_s"] > 0


def test_rollout_still_puts_evenly_spaced_frames_side_by_side(tmp_path):
    from PIL import Image

    colours = [(255, 0, 0), (0, 255, 0), (0, 0, 255), (255, 255, 0), (0, 255, 255)]
    frames = [Image.new("RGB", (8, 6), colour) for colour in colours]
    gif = tmp_path / "rollout.gif"
    frames[0].save(gif, save_all=True, append_images=frames[1:], duration=50)
    still = tmp_path / "still.png"
    run_script(str(ROOT / "benchmarks" / "rollout_still.py"), str(gif), "-o", str(still),
               "--frames", "3", cwd=tmp_path)  # fmt: skip
    with Image.open(still) as image:
        assert image.size == (24, 6)
        picked = [image.getpixel((4 + 8 * index, 3))[:3] for index in range(3)]
    assert picked == [colours[0], colours[2], colours[4]]


def test_the_gpu_check_names_a_failing_and_a_hanging_test_and_keeps_their_output(tmp_path):
    """Each test in a process of its own: a failure keeps its message, a hang is killed
    with its stack in the log."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "benchmarks" / "gpu_check.py")
    gpu_check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu_check)
    tests = tmp_path / "test_cases.py"
    tests.write_text(
        "import time\n\n"
        "def test_passes():\n    pass\n\n"
        "def test_fails():\n    assert 1 == 2, 'the CUDA rollout differs'\n\n"
        "def wait_in_a_kernel():\n    time.sleep(60)\n\n"
        "def test_hangs():\n    wait_in_a_kernel()\n"
    )
    log = tmp_path / "cuda_tests.log"
    cases = (("test_passes", 60), ("test_fails", 60), ("test_hangs", 14))
    rows = [gpu_check._run_tests([f"{tests}::{name}"], tmp_path, log, timeout)[0]
            for name, timeout in cases]  # fmt: skip
    assert [row["outcome"] for row in rows] == ["passed", "failed", "failed"]
    assert "the CUDA rollout differs" in rows[1]["message"]
    assert rows[2]["message"] == "hung: killed at 14 s (stacks in cuda_tests.log)"
    text = log.read_text()
    assert "assert 1 == 2" in text  # the failure's traceback
    assert "Timeout" in text and "wait_in_a_kernel" in text  # faulthandler's stack of the hang


def _fake_run(run_dir: Path, algorithm: str, returns: list[float]) -> Path:
    run_dir.mkdir(parents=True)
    (run_dir / "config.yaml").write_text(f"algorithm:\n  name: {algorithm}\n")
    lines = [
        {
            "kind": "eval",
            "global_step": 65536.0 * (i + 1),
            "time": float(i),
            "eval/avg_reward": value,
            "eval/avg_length": 1000.0,
        }  # fmt: skip
        for i, value in enumerate(returns)
    ]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    return run_dir


def test_locomotion_curves_groups_runs_by_label_or_algorithm(tmp_path, capsys):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import locomotion_curves
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))

    shac = [_fake_run(tmp_path / f"shac{s}", "shac", [100.0, 200.0 + s]) for s in range(2)]
    tuned = _fake_run(tmp_path / "tuned", "ahac", [50.0, 300.0])
    sapo = _fake_run(tmp_path / "sapo", "sapo", [400.0])
    grouped = locomotion_curves.groups([str(shac[0]), str(shac[1]), "AHAC h32:", str(tuned),
                                        str(sapo)])  # fmt: skip
    assert grouped == {"SHAC": shac, "AHAC h32": [tuned, sapo]}
    output = tmp_path / "curves.png"
    assert locomotion_curves.main([*map(str, shac), "--anchor", "hopper", "--output",
                                   str(output)]) == 0  # fmt: skip
    assert output.stat().st_size > 0
    printed = capsys.readouterr().out
    assert "| SHAC | shac1 | 131,072 | 201 | 1,000 |" in printed
    (shac[1] / "metrics.jsonl").write_text('{"kind": "eval"}\nnot json\n{"kind": "eval"}\n')
    assert locomotion_curves.main([*map(str, shac), "--output", str(output)]) == 0
    assert "shac1: skipped," in capsys.readouterr().err
    with pytest.raises(SystemExit, match="no runs after the label Tuned"):
        locomotion_curves.groups([str(sapo), "Tuned:"])


OFFSET_HINGES = """<mujoco>
  <worldbody>
    <body name="base" pos="0 0 1">
      <joint name="tilt" type="hinge" axis="0 1 0"/>
      <joint name="roll" type="hinge" axis="1 0 0" pos="0 0 -0.2"/>
      <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.05"/>
    </body>
  </worldbody>
  <actuator><motor joint="tilt" gear="2"/></actuator>
</mujoco>"""
# A motor through a fixed tendon (applied as MuJoCo applies it).
TENDON_MOTOR = """<mujoco>
  <worldbody>
    <body name="upper" pos="0 0 1">
      <joint name="shoulder" type="hinge" axis="0 1 0"/>
      <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.05"/>
      <body name="lower" pos="0.3 0 0">
        <joint name="elbow" type="hinge" axis="0 1 0"/>
        <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.05"/>
      </body>
    </body>
  </worldbody>
  <tendon><fixed name="bend"><joint joint="shoulder" coef="1"/><joint joint="elbow" coef="-1"/>
  </fixed></tendon>
  <actuator><motor tendon="bend" gear="20" ctrlrange="-1 1"/></actuator>
</mujoco>"""
# An equality constraint and a site actuator: neither applied on Featherstone (named).
COUPLED = TENDON_MOTOR.replace(
    '<geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.05"/>\n      </body>',
    '<geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.05"/>\n'
    '        <site name="tip" pos="0.3 0 0"/>\n      </body>',
).replace(
    '<actuator><motor tendon="bend" gear="20" ctrlrange="-1 1"/></actuator>',
    '<equality><joint joint1="shoulder" joint2="elbow"/></equality>\n'
    '  <actuator><motor site="tip" gear="0 0 1 0 0 0"/></actuator>',
)


def test_mjcf_against_mujoco_reports_what_differs_and_what_does_not_load(tmp_path):
    pytest.importorskip("newton")
    pytest.importorskip("mujoco")
    gymnasium_assets = Path(__import__("gymnasium").__file__).parent / "envs/mujoco/assets"
    (tmp_path / "offset_hinges.xml").write_text(OFFSET_HINGES)
    (tmp_path / "tendon_motor.xml").write_text(TENDON_MOTOR)
    (tmp_path / "coupled.xml").write_text(COUPLED)
    (tmp_path / "broken.xml").write_text("<mujoco><worldbody><body>")
    output = run_script(
        str(ROOT / "benchmarks" / "mjcf_against_mujoco.py"),
        *(str(gymnasium_assets / "reacher.xml"), "offset_hinges.xml", "tendon_motor.xml",
          "coupled.xml", "broken.xml", "--notes"),
        cwd=tmp_path,
    )  # fmt: skip
    rows = {line.split(" | ")[0][2:]: line.split(" | ") for line in output.splitlines()
            if line.startswith("| ") and not line.startswith("| file")}  # fmt: skip
    reacher, offset = rows["reacher.xml"], rows["offset_hinges.xml"]
    tendon, coupled = rows["tendon_motor.xml"], rows["coupled.xml"]
    assert float(reacher[2]) < 1e-4 and float(reacher[3]) < 0.01 and reacher[5] == "2 / 2 |"
    assert float(offset[2]) < 1e-4 and float(offset[3]) < 0.01  # hinges about their own points
    assert float(tendon[3]) < 0.01 and tendon[5] == "1 / 1 |"  # the tendon's motor applied
    assert float(coupled[2]) < 1e-4 and float(coupled[3]) > 0.1 and coupled[5] == "2 / 1 |"
    assert float(coupled[4]) < 0.01  # its equality constraint (named) is all that differs
    assert float(reacher[4]) < 0.01 and float(tendon[4]) < 0.01  # their motors kept there
    assert "coupled.xml: " in output
    assert "equality constraints (joint ('shoulder' to 'elbow')): left out" in output
    assert "no actuator of the file drives a joint, so the actions drive every joint" in output
    assert rows["broken.xml"][1] == "MuJoCo rejects it"


def test_time_to_return_times_each_seed_from_the_command_start(tmp_path):
    """Two seeds of a short PointMass run: the first evaluation reaches any return above
    -1e6 (both seeds, times from the command's start), none reaches 1e9; the finished runs
    read back with --runs give the same counts from their own clock."""
    output = run_script(
        str(ROOT / "benchmarks" / "time_to_return.py"), str(ROOT / "configs" / "point_mass.yaml"),
        "trainer.total_updates=4", "eval.frequency_steps=2048", "env.num_envs=16",
        "--returns", "-1000000", "1e9", "--seeds", "0", "1", "--parallel", "2",
        "--runs-dir", str(tmp_path / "runs"), cwd=tmp_path,
    )  # fmt: skip
    rows = {line.split("|")[1].strip(): line for line in output.splitlines()
            if line.startswith("| ") and "return" not in line}  # fmt: skip
    reached, median = (cell.strip() for cell in rows["-1e+06"].split("|")[2:4])
    assert reached == "2/2" and float(median) > 1.0  # start-up included
    assert rows["1e+09"].split("|")[2].strip() == "0/2"
    assert "--num-threads 1" in output and "seeds [0, 1], 2 at once" in output
    runs = sorted(str(path) for path in (tmp_path / "runs").iterdir())
    again = run_script(str(ROOT / "benchmarks" / "time_to_return.py"), "--returns", "-1000000",
                       "--runs", *runs, cwd=tmp_path)  # fmt: skip
    assert "| -1e+06 | 2/2 |" in again
