"""Data-parallel training on torch.distributed (gloo, two CPU processes under torchrun)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import warm_processes
from helpers import TESTS
from pathgrad.checkpoint import latest_checkpoint, read_checkpoint
from pathgrad.commands import Terminated
from pathgrad.distributed import DataParallel, rank_seed
from pathgrad.distributed.launch import torchrun_command
from pathgrad.distributed.ranks import SharedInterruptGate
from pathgrad.normalization import RunningObservationNormalizer

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(TESTS)}
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
# Long enough to be stopped while it runs; small enough to finish in seconds.
RUN = [
    "env.num_envs=64", "trainer.total_updates=120", "trainer.save_frequency_updates=10",
    "eval.frequency_steps=0", "trainer.normalize_observations=true", "--quiet",
    "algorithm.cfg.lr_scheduler=null",  # a constant rate: the budget changes nothing else
]  # fmt: skip


def torchrun(nproc: int, *args: str, cwd: Path, **kwargs) -> subprocess.CompletedProcess:
    command = [*TORCHRUN, f"--nproc-per-node={nproc}", *args]
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, env=ENV, **kwargs)


def scenarios(names: list[str], nproc: int, directory: Path) -> dict[str, list[dict]]:
    """tests/distributed_run.py's SCENARIOS one after another in one group of ``nproc``
    ranks (under torchrun; one rank: a process of its own); every rank's results."""
    command = [str(TESTS / "distributed_run.py"), ",".join(names), str(directory)]
    if nproc == 1:
        result = warm_processes.run([sys.executable, *command], cwd=TESTS, env=ENV)
    else:
        result = torchrun(nproc, *command, cwd=TESTS)
    assert result.returncode == 0, result.stderr[-3000:]
    return {
        name: [
            torch.load(directory / f"{name}-rank{rank}-of-{nproc}.pt", weights_only=False)
            for rank in range(nproc)
        ]
        for name in names
    }


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory) -> dict[str, list[dict]]:
    """Every scenario on two ranks, in one torchrun launch (``match`` first in both
    launches, so that it starts from a fresh process's state as ``one_process``'s does)."""
    names = ["match", "modes", "early_stop", "compiled"]
    return scenarios(names, 2, tmp_path_factory.mktemp("two_ranks"))


@pytest.fixture(scope="module")
def one_process(tmp_path_factory) -> dict[str, list[dict]]:
    return scenarios(["match", "early_stop"], 1, tmp_path_factory.mktemp("one_process"))


@pytest.mark.xdist_group("two_ranks")
def test_two_ranks_of_32_envs_update_as_one_process_of_64(two_ranks, one_process):
    (one,) = one_process["match"]
    first, second = two_ranks["match"]
    assert torch.equal(first["parameters"], second["parameters"])  # bit-identical ranks
    assert torch.allclose(first["parameters"], one["parameters"], rtol=0, atol=1e-12)
    assert not torch.equal(one["parameters"], torch.zeros_like(one["parameters"]))
    for key in ("mean", "var", "count"):  # the normalizer merge: the 64-env statistics
        assert torch.allclose(first[key], one[key], rtol=1e-12, atol=1e-14), key
        assert torch.equal(first[key], second[key])
    assert first["loss"] == pytest.approx(one["loss"], rel=1e-12)
    assert first["global_step"] == one["global_step"] == 2 * 8 * 64  # global env steps


@pytest.mark.xdist_group("two_ranks")
def test_algorithms_and_modes_keep_ranks_identical(two_ranks):
    first, second = two_ranks["modes"]
    for case in ("shac", "sapo", "sapo_ensemble", "ahac_stiffness", "complete", "adjoint_clip"):
        a, b = first[case], second[case]
        assert torch.equal(a["parameters"], b["parameters"]), case
        assert not torch.equal(a["parameters"], a["initial"]), case  # it did train
        assert a["returns"] == b["returns"], case  # gathered episode statistics
        saved = read_checkpoint(a["checkpoint"])
        assert saved["data_parallel"]["world_size"] == 2
        assert len(saved["data_parallel"]["ranks"]) == 2
    shac = read_checkpoint(first["shac"]["checkpoint"])
    assert shac["global_step"] == 3 * 8 * 8 * 2
    ranks = shac["data_parallel"]["ranks"]  # each rank simulated its own envs
    assert not torch.equal(ranks[0]["env"]["state"]["goal"], ranks[1]["env"]["state"]["goal"])


@pytest.mark.xdist_group("two_ranks")
def test_a_stop_requested_on_rank_zero_ends_every_rank_after_the_same_update(
    two_ranks, one_process
):
    ranks = two_ranks["early_stop"]
    assert [rank["num_updates"] for rank in ranks] == [3, 3]  # agreed in update 3's average
    assert all(rank["stopped_early"] for rank in ranks)
    (alone,) = one_process["early_stop"]
    assert alone["num_updates"] == 2 and alone["stopped_early"]


@pytest.mark.xdist_group("two_ranks")
def test_the_compiled_update_keeps_ranks_identical(two_ranks):
    first, second = two_ranks["compiled"]
    assert first["scope"] == "update"
    assert torch.equal(first["parameters"], second["parameters"])
    assert not torch.equal(first["parameters"], first["initial"])


class ThreeRanks:
    """Stands in for the all-reduce of three ranks' normalizers (run one after another)."""

    world_size = 3

    def __init__(self, rank: int, members: list):
        self.rank, self.members = rank, members
        self.calls = 0

    def sum_across_ranks(self, values, what):
        self.calls += 1
        return sum(member.pending_moments() for member in self.members)


@pytest.mark.parametrize("scale", [1.0, 1e-3])  # also data far from zero and narrow
def test_the_normalizer_merge_equals_one_process_over_all_batches(scale):
    torch.manual_seed(0)
    ranks = [RunningObservationNormalizer(3) for _ in range(3)]
    for rank, normalizer in enumerate(ranks):
        normalizer.shared = ThreeRanks(rank, ranks)
    alone = RunningObservationNormalizer(3)
    for _ in range(3):  # three updates, merged into running statistics
        batches = [torch.randn(n, 3, dtype=torch.float64) * scale + 100 for n in (5, 11, 7)]
        batches[1][2, 0] = float("nan")  # a diverged row is left out on its rank
        for normalizer, batch in zip(ranks, batches, strict=True):
            normalizer.update(batch)
        gathered = ranks[0].shared.sum_across_ranks(None, "test")  # the gradient average
        for normalizer in ranks:
            normalizer.merge_gathered(gathered)
        alone.update(torch.cat(batches))
    for normalizer in ranks:
        assert torch.equal(normalizer.mean, ranks[0].mean)
        assert float(normalizer.count) == float(alone.count)
        assert torch.allclose(normalizer.mean, alone.mean, rtol=1e-13, atol=0)
        assert torch.allclose(normalizer.var, alone.var, rtol=1e-11, atol=0)
    # Statistics read with sums pending are merged first (a collective, here counted).
    for normalizer, batch in zip(ranks, batches, strict=True):
        normalizer.update(batch)
    calls = ranks[0].shared.calls
    ranks[0].constants(torch.float64)
    assert ranks[0].shared.calls == calls + 1


def test_a_signal_during_the_all_reduce_is_agreed_in_the_next_update():
    gate = SharedInterruptGate()
    gate.close()
    sent = gate.votes()  # this rank's vote leaves with the gradient average...
    gate.request(Terminated)  # ...and the signal lands while the all-reduce runs
    gate.agree(sent)  # no rank had voted yet
    gate.open()  # nothing to raise after this update
    gate.close()
    votes = gate.votes()
    assert votes.tolist() == [0.0, 1.0, 0.0]  # the request was kept, not lost
    gate.agree(votes)
    with pytest.raises(Terminated):
        gate.open()
    gate.close()
    gate.agree(gate.votes())  # a request is counted once
    gate.open()


def test_rank_seeds_differ_and_rank_zero_keeps_the_seed():
    seeds = [rank_seed(7, rank) for rank in range(4)]
    assert seeds[0] == 7 and len(set(seeds)) == 4
    assert 7 + 1 not in seeds[1:]  # never the evaluation env's seed


def test_nproc_becomes_a_torchrun_command():
    command = torchrun_command(3, ["train", "--nproc", "3", "cfg.yaml", "--nproc=3", "a.b=1"])
    assert command[1:] == [
        "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=3",
        "-m", "pathgrad", "train", "cfg.yaml", "a.b=1",
    ]  # fmt: skip


def final_policy(run_dir: Path) -> dict:
    return read_checkpoint(latest_checkpoint(run_dir / "checkpoints"))


def wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def rank_pids(launcher: subprocess.Popen) -> dict[int, int]:
    """Rank -> pid of the workers torchrun started."""
    pids = {}
    children = Path(f"/proc/{launcher.pid}/task/{launcher.pid}/children")
    for pid in map(int, children.read_text().split()):
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        values = dict(item.split(b"=", 1) for item in environ if b"=" in item)
        if b"RANK" in values:
            pids[int(values[b"RANK"])] = pid
    return pids


@pytest.fixture
def start(tmp_path: Path):
    """Start a 2-rank training in the background; its whole process group dies with the test."""
    launched: list[subprocess.Popen] = []

    def launch(name: str, *args: str) -> subprocess.Popen:
        command = [*TORCHRUN, "--nproc-per-node=2", "-m", "pathgrad", "train", *RUN, *args,
                   f"logging.runs_dir={name}"]  # fmt: skip
        launched.append(
            subprocess.Popen(
                command,
                cwd=tmp_path,
                env=ENV,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                start_new_session=True,
            )  # fmt: skip
        )
        return launched[-1]

    yield launch
    for launcher in launched:  # a failed test leaves no ranks running into the next ones
        with contextlib.suppress(ProcessLookupError):
            os.killpg(launcher.pid, signal.SIGKILL)
        launcher.communicate()


def first_checkpoint_written(tmp_path: Path, name: str):
    return lambda: any((tmp_path / name).glob("*/checkpoints/index.json"))


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs /proc")
def test_sigterm_to_one_rank_stops_all_with_a_checkpoint_and_resume_is_exact(tmp_path, start):
    # A budget it cannot reach before the signal, whatever the machine's load (a
    # 120-update run once finished between the first checkpoint and the signal).
    launcher = start("stopped", "trainer.total_updates=100000")
    wait_for(first_checkpoint_written(tmp_path, "stopped"), 120, "the first checkpoint")
    os.kill(rank_pids(launcher)[1], signal.SIGTERM)  # not the rank that writes
    _, stderr = launcher.communicate(timeout=120)
    assert launcher.returncode != 0, stderr[-2000:]
    (stopped,) = (tmp_path / "stopped").iterdir()
    summary = json.loads((stopped / "summary.json").read_text())
    assert summary["status"] == "terminated"
    assert 0 < summary["num_updates"] < 100000
    final = final_policy(stopped)
    assert final["kind"] == "final" and final["num_updates"] == summary["num_updates"]

    budget = str(summary["num_updates"] + 15)
    resumed = torchrun(2, "-m", "pathgrad", "resume", str(stopped), "--total-updates", budget,
                       "--quiet", cwd=tmp_path)  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    straight = torchrun(2, "-m", "pathgrad", "train", *RUN, f"trainer.total_updates={budget}",
                        "logging.runs_dir=straight", cwd=tmp_path)  # fmt: skip
    assert straight.returncode == 0, straight.stderr[-3000:]
    (uninterrupted,) = (tmp_path / "straight").iterdir()
    a, b = final_policy(stopped), final_policy(uninterrupted)
    assert a["num_updates"] == b["num_updates"] == int(budget)
    for key in a["policy"]:
        assert torch.equal(a["policy"][key], b["policy"][key]), key
    assert torch.equal(a["observation_normalizer"]["mean"], b["observation_normalizer"]["mean"])
    assert a["episode_statistics"]["returns"] == b["episode_statistics"]["returns"]

    # Another world size resumes the learning state with fresh rollouts.
    alone = warm_processes.run(
        [sys.executable, "-m", "pathgrad", "resume", str(uninterrupted), "--total-updates",
         str(int(budget) + 5), "--quiet"],
        cwd=tmp_path, env=ENV,
    )  # fmt: skip
    assert alone.returncode == 0, alone.stderr[-2000:]
    assert final_policy(uninterrupted)["num_updates"] == int(budget) + 5
    assert "data_parallel" not in final_policy(uninterrupted)


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs /proc")
@pytest.mark.parametrize("victim", [0, 1])
def test_a_rank_killed_under_torchrun_ends_the_job_with_its_checkpoint_intact(
    tmp_path, start, victim
):
    # Under the user's own torchrun, torchrun's agent reports the killed rank, and may stop
    # the survivor before it notices (pathgrad's launcher says it in one line whatever the
    # order: test_distributed_faults.py). Either way the job ends, told why, nothing lost.
    launcher = start("killed", "trainer.total_updates=100000")
    wait_for(first_checkpoint_written(tmp_path, "killed"), 120, "the first checkpoint")
    os.kill(rank_pids(launcher)[victim], signal.SIGKILL)
    started = time.monotonic()
    _, stderr = launcher.communicate(timeout=120)  # no hang
    assert launcher.returncode != 0
    assert time.monotonic() - started < 60
    (run_dir,) = (tmp_path / "killed").iterdir()
    checkpoint = read_checkpoint(latest_checkpoint(run_dir / "checkpoints"))  # intact
    assert checkpoint["data_parallel"]["world_size"] == 2
    survivor = 1 - victim
    told = (
        f"pathgrad: error: rank {survivor} of 2: lost contact with the other ranks" in stderr
        or "Signal 9 (SIGKILL) received by PID" in stderr  # torchrun's report
    )
    assert told, stderr[-3000:]


def test_an_algorithm_that_does_not_average_gradients_is_refused():
    from pathgrad.algo import APG, APGCfg
    from pathgrad.differentiable_trainer import DifferentiableTrainer, DifferentiableTrainerCfg
    from pathgrad.envs import PointMass
    from pathgrad.policies import GaussianMLPPolicy

    class LocalOnly(APG):
        supports_data_parallel = False

    env = PointMass(4, seed=0)
    policy = GaussianMLPPolicy(6, 2, hidden_sizes=(8,))
    with pytest.raises(ValueError, match="LocalOnly cannot train data-parallel"):
        DifferentiableTrainer(
            DifferentiableTrainerCfg(),
            env,
            policy,
            LocalOnly(APGCfg(), policy),
            data_parallel=DataParallel(rank=0, world_size=2),
        )


def test_a_world_of_one_meets_no_one():
    alone = DataParallel()
    parameter = torch.nn.Parameter(torch.ones(3))
    parameter.grad = torch.full((3,), 2.0)
    extras = torch.tensor([1.0, 2.0], dtype=torch.float64)
    assert alone.average_gradients([parameter], extras) is extras
    assert torch.equal(parameter.grad, torch.full((3,), 2.0))
    assert alone.all_agree(False) is False and alone.exchange("x", 5) == [5]
    assert alone.from_main("x", lambda: "value") == "value"


EXIT_SCRIPT = """
import atexit, sys
from pathgrad.distributed import context
atexit.register(lambda: print("teardown", flush=True))
context._LEFT_A_GROUP = sys.argv[1] == "left"
print("output written", end="")  # not flushed yet
context.exit_rank(5)
print(" and returned", end="")
sys.exit(3)
"""


def test_a_rank_that_left_its_group_exits_without_teardown_and_keeps_its_output(tmp_path):
    script = tmp_path / "exit.py"
    script.write_text(EXIT_SCRIPT)
    run = [sys.executable, str(script)]
    left = subprocess.run([*run, "left"], capture_output=True, text=True, env=ENV)
    assert (left.returncode, left.stdout) == (5, "output written")  # no atexit teardown
    alone = subprocess.run([*run, "alone"], capture_output=True, text=True, env=ENV)
    assert (alone.returncode, alone.stdout) == (3, "output written and returned" + "teardown\n")


def test_nproc_below_one_is_a_usage_error(tmp_path):
    result = warm_processes.run(
        [sys.executable, "-m", "pathgrad", "train", "--nproc", "0"], cwd=tmp_path, env=ENV
    )
    assert result.returncode == 2
    assert result.stderr.strip() == "pathgrad: error: --nproc must be at least 1, got 0."
    assert not (tmp_path / "runs").exists()


def test_nproc_trains_with_two_ranks_and_rank_zero_alone_writes(tmp_path):
    result = warm_processes.run(  # the command's process warm; torchrun and its ranks not
        [sys.executable, "-m", "pathgrad", "train", "--nproc", "2", "env.num_envs=16",
         "trainer.total_updates=3", "eval.frequency_steps=512"],
        cwd=tmp_path, env=ENV,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.count("data-parallel: 2 ranks (gloo), 16 envs each, 32 in all") == 1
    assert result.stdout.count("completed: 3 updates, 3,072 env steps") == 1  # rank 0 prints
    (run_dir,) = (tmp_path / "runs").iterdir()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["global_step"] == 3 * 32 * 32
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["num_updates"] for r in records if r["kind"] == "train"] == [1, 2, 3]
    assert [r["global_step"] for r in records if r["kind"] == "eval"] == [1024, 2048, 3072]
