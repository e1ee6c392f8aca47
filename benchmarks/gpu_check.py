"""The prepared GPU check: pathgrad's CUDA paths tested and timed in one command.

Writes ``OUT/gpu_check.json`` and ``OUT/gpu_check.md`` (and pytest's output,
``OUT/cuda_tests.log``):

1. the tests marked ``cuda`` (``tests/gpu``): captured Newton graphs against
   launching every kernel, CUDA against CPU rollouts and gradients (torch envs,
   Newton Ants), a CUDA checkpoint evaluated, exported and resumed on the CPU, a
   one-rank NCCL group through the data-parallel path, ``torch_compile`` on CUDA;
2. APG training throughput on PointMass and Pendulum (eager and compiled update);
3. DiffRLAnt: forward and forward + backward env-steps/s of 32-step windows,
   SHAC training env-steps/s at the paper's settings, peak GPU memory.

Every measurement runs inside a time budget (``--budget-s``, 450 s by default:
with the start of a machine it fits 8 minutes); what does not fit is reported
as skipped, as is what a failure stopped. ``--dry-run`` runs what the CPU can at
small sizes and reports the rest "skipped: no CUDA" (``make test`` runs it).

Run: ``python benchmarks/gpu_check.py OUT`` (on a GPU machine, after ``make venv``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import traceback
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
FULL = {
    "apg_envs": (1024, 8192, 65536),
    "ant_envs": (256, 1024, 4096),
    "window": 32,
    "timed_updates": 5,
}
DRY = {"apg_envs": (64, 256), "ant_envs": (16,), "window": 4, "timed_updates": 2}
APG_CONFIGS = {"PointMass": "point_mass.yaml", "Pendulum": "pendulum.yaml"}
QUIET = ["eval.frequency_steps=0", "logging.tensorboard=false", "trainer.save_frequency_updates=0"]


class Budget:
    """Seconds left of the check; each measurement asks before it starts."""

    def __init__(self, seconds: float) -> None:
        self.deadline = time.monotonic() + seconds

    def left(self) -> float:
        return self.deadline - time.monotonic()


def synchronize() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def machine() -> dict:
    info = {"python": platform.python_version(), "torch": torch.__version__,
            "cuda": torch.cuda.is_available(), "cpu_count": os.cpu_count()}  # fmt: skip
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
        info["cuda_version"] = torch.version.cuda
        info["gpu_memory_gib"] = round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1)
    for package in ("warp", "newton"):
        try:
            info[package] = __import__(package).__version__
        except Exception as error:  # noqa: BLE001 - absent or broken: say which
            info[package] = f"unavailable ({type(error).__name__})"
    return info


def cuda_test_ids() -> list[str]:
    """The ids of the tests marked ``cuda``, the Newton ones last (they compile the most)."""
    command = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "cuda",
               "-p", "no:cacheprovider", str(ROOT / "tests" / "gpu")]  # fmt: skip
    listing = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)
    ids = [line.strip() for line in listing.stdout.splitlines() if "::" in line]
    return sorted(ids, key=lambda test_id: "Newton" in test_id or "newton" in test_id)


def cuda_tests(out: Path, budget: Budget, reserve_s: float, test_timeout_s: float,
               rows: list, save) -> None:  # fmt: skip
    """Each test marked ``cuda`` in a process of its own: one row per test.

    A test that fails or hangs (in a kernel, a synchronisation) costs only its
    own time: 15 s (a third of a shorter limit) before its ``test_timeout_s``
    are up, faulthandler writes every thread's stack, and ``cuda_tests.log``
    gets each test's whole output as it ends (a check stopped at the limit of
    its machine keeps what ran).
    """
    log = out / "cuda_tests.log"
    log.write_text("")
    try:
        ids = cuda_test_ids()
    except subprocess.TimeoutExpired:
        ids = []
    if not ids:
        rows.append({"test": "tests/gpu", "outcome": "failed", "message": "no tests collected"})
        return
    # Without CUDA every test skips itself: one process tells each outcome.
    batches = [[test_id] for test_id in ids] if torch.cuda.is_available() else [ids]
    for batch in batches:
        if budget.left() - reserve_s < 20:
            rows += [{"test": test_id.split("::", 1)[1], "outcome": "skipped",
                      "message": "skipped: time budget"} for test_id in batch]  # fmt: skip
            continue
        rows += _run_tests(batch, out, log, min(test_timeout_s, budget.left() - reserve_s))
        save()


def _run_tests(ids: list[str], out: Path, log: Path, timeout: float) -> list[dict]:
    """One pytest process for ``ids``: a row per test (a hang fails them all)."""
    report = out / "cuda_test.xml"
    report.unlink(missing_ok=True)
    stacks_at = max(5, int(timeout - min(15, timeout / 3)))  # faulthandler's, before the kill
    command = [sys.executable, "-m", "pytest", *ids, "-q", "--tb=short", "-p", "no:cacheprovider",
               f"--junitxml={report}",
               f"--override-ini=faulthandler_timeout={stacks_at}"]  # fmt: skip
    began = time.monotonic()
    try:
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
        stdout, stderr, message = done.stdout, done.stderr, ""
        if not report.is_file():
            message = f"pytest exited {done.returncode} with no report"
    except subprocess.TimeoutExpired as error:
        stdout, stderr = error.stdout, error.stderr
        message = f"hung: killed at {timeout:.0f} s (stacks in cuda_tests.log)"
    seconds = round(time.monotonic() - began, 1)
    texts = [t.decode() if isinstance(t, bytes) else (t or "") for t in (stdout, stderr)]
    with log.open("a") as file:
        file.write(f"\n===== {' '.join(ids)} ({seconds} s)\n" + "\n".join(texts))
    if message:
        return [{"test": test_id.split("::", 1)[1], "outcome": "failed", "message": message,
                 "seconds": seconds} for test_id in ids]  # fmt: skip
    rows = []
    for case in ElementTree.parse(report).iter("testcase"):
        row = {"test": case.get("name"), "outcome": "passed", "message": "",
               "seconds": round(float(case.get("time", 0.0)), 1)}  # fmt: skip
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                lines = (child.get("message") or child.text or "").strip().splitlines()[:1]
                row["outcome"] = "skipped" if child.tag == "skipped" else "failed"
                row["message"] = lines[0][:300] if lines else ""
        if row["outcome"] == "skipped" and "no CUDA" in row["message"]:
            row["message"] = "skipped: no CUDA"
        rows.append(row)
    return rows


def _trainer(config_file: Path, overrides: list[str], folder: Path):
    from pathgrad.runs.config import load_config
    from pathgrad.runs.run import build_run

    config = load_config(config_file, [*QUIET, *overrides])
    return build_run(config, folder).trainer  # checkpoints under folder/checkpoints


def training_rate(trainer, timed_updates: int) -> dict:
    """Env-steps/s of ``timed_updates`` updates after two warm-up updates (compilation)."""
    began = time.perf_counter()
    trainer.train(total_updates=2)
    synchronize()
    warm_up = time.perf_counter() - began
    start_step = trainer.global_step
    began = time.perf_counter()
    trainer.train(total_updates=2 + timed_updates)
    synchronize()
    seconds = time.perf_counter() - began
    return {"env_steps_per_s": round((trainer.global_step - start_step) / seconds),
            "warm_up_s": round(warm_up, 1), "compile_scope": trainer.compile_scope}  # fmt: skip


def apg_throughput(sizes: dict, device: str, budget: Budget, dry: bool, folder: Path,
                   rows: list, save) -> None:  # fmt: skip
    """Every eager row first, then the compiled ones (each compiles for a minute or so)."""
    for mode in ("eager", "compiled"):
        for env in APG_CONFIGS:
            for num_envs in sizes["apg_envs"]:
                row = {"env": env, "num_envs": num_envs, "mode": mode}
                rows.append(row)
                if dry and mode == "compiled":
                    row["status"] = "skipped in --dry-run (a cold compile takes a minute on a CPU)"
                    continue
                if budget.left() < 30:
                    row["status"] = "skipped: time budget"
                    continue
                compiled = "true" if mode == "compiled" else "false"
                overrides = [f"env.num_envs={num_envs}", f"env.device={device}",
                             f"trainer.torch_compile={compiled}"]  # fmt: skip
                row.update(_measure(lambda o=overrides, e=env, n=num_envs, m=mode: training_rate(
                    _trainer(ROOT / "configs" / APG_CONFIGS[e], o, folder / f"{e}-{n}-{m}"),
                    sizes["timed_updates"])))  # fmt: skip
                save()


def _measure(work) -> dict:
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    try:
        result = {"status": "ok", **work()}
    except Exception as error:  # noqa: BLE001 - one failure must not stop the report
        lines = traceback.format_exception_only(type(error), error)
        return {"status": f"failed: {''.join(lines).strip()[:300]}"}
    if torch.cuda.is_available():
        result["peak_torch_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 3)
        free, total = torch.cuda.mem_get_info()
        result["device_used_gib"] = round((total - free) / 2**30, 2)
    return result


def ant_windows(num_envs: int, window: int, device: str) -> dict:
    """Forward (no graph) and forward + backward env-steps/s of DiffRLAnt windows."""
    from pathgrad.envs.newton import DiffRLAnt

    env = DiffRLAnt(num_envs, device, seed=0)
    env.reset(seed=0)
    start = {key: value.detach().clone() for key, value in env.state.items()}
    generator = torch.Generator().manual_seed(0)
    actions = (2 * torch.rand(window, num_envs, 8, generator=generator) - 1).to(device)

    def run(backward: bool) -> None:
        state = dict(start)
        leaf = actions.clone().requires_grad_(backward)
        total = torch.zeros((), device=device)
        with torch.set_grad_enabled(backward):
            for action in leaf:
                state, reward = env._dynamics_and_reward(state, action)
                total = total + reward.sum()
        if backward:
            total.backward()

    rates = {}
    for name, backward in (("forward", False), ("forward_backward", True)):
        run(backward)  # capture
        synchronize()
        began = time.perf_counter()
        run(backward)
        synchronize()
        rates[f"{name}_env_steps_per_s"] = round(window * num_envs / (time.perf_counter() - began))
    return rates


def ant_throughput(sizes: dict, device: str, budget: Budget, folder: Path, rows: list,
                   save) -> None:  # fmt: skip
    for num_envs in sizes["ant_envs"]:
        row = {"env": "DiffRLAnt", "num_envs": num_envs}
        rows.append(row)
        if budget.left() < 40:
            row["status"] = "skipped: time budget"
            continue
        row.update(_measure(lambda n=num_envs: ant_windows(n, sizes["window"], device)))
        save()
        if row["status"] != "ok" or budget.left() < 40:
            continue
        overrides = [f"env.num_envs={num_envs}", f"env.device={device}",
                     f"trainer.segment_length={sizes['window']}"]  # fmt: skip
        shac = _measure(lambda o=overrides, n=num_envs: training_rate(
            _trainer(ROOT / "configs" / "diffrl_ant_shac.yaml", o, folder / f"ant-{n}"),
            sizes["timed_updates"]))  # fmt: skip
        row["shac_env_steps_per_s"] = shac.get("env_steps_per_s")
        row["shac_status"] = shac["status"]
        row["shac_peak_torch_gib"] = shac.get("peak_torch_gib")
        save()


def table(header: list[str], rows: list[list]) -> list[str]:
    """A markdown table; ``None`` cells are empty."""
    cells = [[("" if cell is None else str(cell)) for cell in row] for row in rows]
    return [f"| {' | '.join(header)} |", f"|{'---|' * len(header)}"] + [
        f"| {' | '.join(row)} |" for row in cells
    ]


def markdown(report: dict) -> str:
    info = report["machine"]
    lines = [
        f"# pathgrad GPU check ({'dry run, ' if report['dry_run'] else ''}"
        f"{info.get('gpu', 'no GPU')})",
        "",
        f"torch {info['torch']}, CUDA {info.get('cuda_version', '-')}, warp {info['warp']}, "
        f"newton {info['newton']}; {report['seconds']:.0f} s in all.",
        "",
        "## Tests marked cuda",
        "",
    ]
    lines += table(
        ["test", "outcome", "seconds", "message"],
        [[r["test"], r["outcome"], r.get("seconds"), r["message"]] for r in report["tests"]],
    )
    lines += ["", "## APG training (env-steps/s)", ""]
    lines += table(
        ["env", "envs", "update", "env-steps/s", "warm-up s", "peak torch GiB", "status"],
        [
            [
                r["env"],
                r["num_envs"],
                r["mode"],
                r.get("env_steps_per_s"),
                r.get("warm_up_s"),
                r.get("peak_torch_gib"),
                r["status"],
            ]  # fmt: skip
            for r in report["apg"]
        ],
    )
    lines += ["", "## DiffRLAnt (env-steps/s)", ""]
    header = ["envs", "window forward", "window forward + backward", "SHAC training",
              "SHAC peak torch GiB", "device used GiB", "status"]  # fmt: skip
    rows = []
    for r in report["ant"]:
        status = r["status"]
        if r.get("shac_status", "ok") != "ok":
            status += f"; SHAC {r['shac_status']}"
        rows.append([r["num_envs"], r.get("forward_env_steps_per_s"),
                     r.get("forward_backward_env_steps_per_s"), r.get("shac_env_steps_per_s"),
                     r.get("shac_peak_torch_gib"), r.get("device_used_gib"), status])  # fmt: skip
    lines += table(header, rows)
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="folder for gpu_check.json and gpu_check.md")
    parser.add_argument("--dry-run", action="store_true", help="small sizes; CPU where no CUDA")
    parser.add_argument("--budget-s", type=float, default=450.0, help="seconds for everything")
    parser.add_argument("--parts", default="tests,ant,apg", help="comma-separated parts to run")
    parser.add_argument("--test-timeout-s", type=float, default=150.0, help="seconds per test")
    args = parser.parse_args()
    began = time.monotonic()
    budget = Budget(args.budget_s)
    args.out.mkdir(parents=True, exist_ok=True)
    dry = args.dry_run or not torch.cuda.is_available()
    sizes = DRY if dry else FULL
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.set_num_threads(1 if device == "cpu" else torch.get_num_threads())
    report = {"dry_run": dry, "machine": machine(), "device": device}
    report["tests"], report["ant"], report["apg"] = [], [], []

    def save() -> None:
        """The report so far (a check stopped at its limit still leaves its rows)."""
        report["seconds"] = round(time.monotonic() - began, 1)
        (args.out / "gpu_check.json").write_text(json.dumps(report, indent=2) + "\n")
        (args.out / "gpu_check.md").write_text(markdown(report))

    parts = set(args.parts.split(","))
    if "tests" in parts:
        reserve = 120.0 if parts - {"tests"} else 10.0  # for the throughput tables
        cuda_tests(args.out, budget, reserve, args.test_timeout_s, report["tests"], save)
        save()
    with tempfile.TemporaryDirectory() as scratch:
        # The Ant first: its rows matter most, the compiled APG rows cost the most.
        hung = [
            r["test"] for r in report["tests"] if "Newton" in r["test"] and "hung" in r["message"]
        ]
        if "ant" in parts and hung:  # in this process it would hang the rest of the check
            report["ant"] += [{"env": "DiffRLAnt", "num_envs": n, "status": "skipped: the Newton "
                               f"test {hung[0]} hung"} for n in sizes["ant_envs"]]  # fmt: skip
        elif "ant" in parts:
            ant_throughput(sizes, device, budget, Path(scratch), report["ant"], save)
        if "apg" in parts:
            apg_throughput(sizes, device, budget, dry, Path(scratch), report["apg"], save)
    save()
    print(markdown(report))
    failed = [r for r in report["tests"] if r["outcome"] == "failed"]
    failed += [r for r in report["apg"] + report["ant"] if r["status"].startswith("failed")]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
