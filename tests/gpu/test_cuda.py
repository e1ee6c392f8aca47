"""The CUDA paths, checked on a GPU (marker ``cuda``; skipped without CUDA).

Run by ``benchmarks/gpu_check.py`` (``pytest -m cuda tests/gpu``) where a GPU is
lent; here, without CUDA, every test reports "skipped: no CUDA".
"""

from __future__ import annotations

import contextlib
import json
import socket
from pathlib import Path

import pytest
import torch

from helpers import ROOT, run_cli
from pathgrad.algo.registry import get_algorithm
from pathgrad.differentiable_trainer import DifferentiableTrainer, DifferentiableTrainerCfg
from pathgrad.distributed import DataParallel
from pathgrad.envs import (
    CartPoleSwingUp,
    DiffRLCartPoleSwingUp,
    MountainCarContinuous,
    Pendulum,
    PointMass,
    Quadrotor,
    Reacher,
)
from pathgrad.policies import GaussianMLPPolicy

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA"),
]

TORCH_ENVS = [PointMass, Pendulum, CartPoleSwingUp, DiffRLCartPoleSwingUp,
              MountainCarContinuous, Quadrotor, Reacher]  # fmt: skip


def _newton(name: str):
    pytest.importorskip("newton")
    from pathgrad.envs.newton import DiffRLAnt, NewtonAnt

    return {"NewtonAnt": NewtonAnt, "DiffRLAnt": DiffRLAnt}[name]


def _chain(env, state: dict, actions: torch.Tensor) -> tuple[list, torch.Tensor]:
    """States and the action gradient of the summed reward along a chain of raw steps."""
    actions = actions.clone().requires_grad_()
    states, total = [], torch.zeros((), device=actions.device)
    for action in actions:
        state, reward = env._dynamics_and_reward(state, action)
        states.append({key: value.detach() for key, value in state.items()})
        total = total + reward.sum()
    (gradient,) = torch.autograd.grad(total, actions)
    return states, gradient


def _close(got: torch.Tensor, want: torch.Tensor, rtol: float, what: str) -> None:
    """Within ``rtol`` of the largest magnitude (float32 kernels differ in rounding)."""
    if not want.is_floating_point():
        assert torch.equal(got.cpu(), want.cpu()), what
        return
    scale = float(want.abs().max()) + 1e-6
    error = float((got.cpu() - want.cpu()).abs().max())
    assert error <= rtol * scale, f"{what}: max error {error:.3e} against scale {scale:.3e}"


def _cuda_against_cpu(factory, steps: int, rtol: float, **kwargs) -> None:
    cpu = factory(16, "cpu", seed=0, **kwargs)
    cpu.reset(seed=0)
    cuda = factory(16, "cuda", seed=0, **kwargs)
    start = {key: value.detach().clone() for key, value in cpu.state.items()}
    generator = torch.Generator().manual_seed(1)
    actions = 2 * torch.rand(steps, 16, cpu.action_dim, generator=generator) - 1
    want_states, want_gradient = _chain(cpu, start, actions)
    got_states, got_gradient = _chain(
        cuda, {key: value.cuda() for key, value in start.items()}, actions.cuda()
    )
    for step, (got, want) in enumerate(zip(got_states, want_states, strict=True)):
        for key in want:
            _close(got[key], want[key], rtol, f"{factory.__name__} step {step} {key}")
    _close(got_gradient, want_gradient, 10 * rtol, f"{factory.__name__} action gradient")


@pytest.mark.parametrize("factory", TORCH_ENVS, ids=lambda factory: factory.__name__)
def test_torch_env_rollouts_and_gradients_on_cuda_equal_the_cpu_s(factory):
    _cuda_against_cpu(factory, steps=10, rtol=1e-4)


@pytest.mark.parametrize("name", ["NewtonAnt", "DiffRLAnt"])
def test_newton_ant_rollouts_and_gradients_on_cuda_equal_the_cpu_s(name):
    _cuda_against_cpu(_newton(name), steps=5, rtol=1e-3)


@pytest.mark.parametrize("name", ["NewtonAnt", "DiffRLAnt"])
def test_the_newton_bridge_replaying_captured_graphs_equals_launching_every_kernel(name):
    factory = _newton(name)
    launched = factory(16, "cuda", seed=0, capture=False)
    launched.reset(seed=0)
    captured = factory(16, "cuda", seed=0, capture=True)
    start = {key: value.detach().clone() for key, value in launched.state.items()}
    actions = 2 * torch.rand(6, 16, 8, generator=torch.Generator().manual_seed(2)) - 1
    want_states, want_gradient = _chain(launched, start, actions.cuda())
    for replay in range(2):  # the first call captures, the second replays
        got_states, got_gradient = _chain(captured, dict(start), actions.cuda())
        for step, (got, want) in enumerate(zip(got_states, want_states, strict=True)):
            for key in want:
                _close(got[key], want[key], 1e-5, f"replay {replay} step {step} {key}")
        _close(got_gradient, want_gradient, 1e-4, f"replay {replay} action gradient")


def _trainer(device: str, directory: Path, data_parallel=None, **settings) -> DifferentiableTrainer:
    torch.manual_seed(0)  # float64: Adam turns float32 rounding of tiny gradients into steps
    env = PointMass(64, device, max_episode_steps=12, seed=0, dtype="float64")
    policy = GaussianMLPPolicy(6, 2, hidden_sizes=(32,), squash=True).to(device, torch.float64)
    factory, cfg_type = get_algorithm("apg")
    learner = factory(cfg_type(optimizer={"name": "adam", "learning_rate": 1e-2}), policy, env)
    cfg = DifferentiableTrainerCfg(segment_length=4, update_horizon=8, normalize_observations=True,
                                   checkpoint_dir=str(directory), **settings)  # fmt: skip
    return DifferentiableTrainer(cfg, env, policy, learner, data_parallel=data_parallel)


def _parameters(trainer: DifferentiableTrainer) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1).cpu() for p in trainer.policy.parameters()])


def test_torch_compile_on_cuda_trains_as_eager_does(tmp_path):
    eager = _trainer("cuda", tmp_path / "eager")  # each built, then trained: one noise stream
    start = _parameters(eager)
    eager.train(total_updates=3)
    compiled = _trainer("cuda", tmp_path / "compiled", torch_compile=True, compile_chunk_steps=4)
    assert torch.equal(start, _parameters(compiled))
    compiled.train(total_updates=3)
    assert compiled.compile_scope == "update", compiled.compile_scope_reason
    assert not torch.equal(_parameters(eager), start)
    _close(_parameters(compiled), _parameters(eager), 1e-9, "parameters after 3 updates")


class OneRankGroup(DataParallel):
    """A process group of one rank that still goes through every collective."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.collectives: list[str] = []

    @property
    def active(self) -> bool:
        return True

    def _collective(self, what, operation):
        self.collectives.append(what)
        return super()._collective(what, operation)


def _free_port() -> int:
    with contextlib.closing(socket.socket()) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_a_one_rank_nccl_group_trains_as_a_process_without_one(tmp_path):
    import torch.distributed as dist

    alone = _trainer("cuda", tmp_path / "alone")
    alone.train(total_updates=3)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{_free_port()}",
                            rank=0, world_size=1)  # fmt: skip
    try:
        group = OneRankGroup(0, 1, "nccl", torch.device("cuda", torch.cuda.current_device()))
        ranked = _trainer("cuda", tmp_path / "ranked", data_parallel=group)
        ranked.train(total_updates=3)
        assert group.collectives.count("the gradient average") == 3, group.collectives
    finally:
        dist.destroy_process_group()
    _close(_parameters(ranked), _parameters(alone), 1e-12, "parameters after 3 updates")


def test_a_checkpoint_written_on_cuda_evaluates_exports_and_resumes_on_the_cpu(tmp_path):
    args = ["train", str(ROOT / "configs" / "point_mass.yaml"), "env.device=cuda",
            "trainer.total_updates=4", "eval.frequency_steps=0", "logging.tensorboard=false",
            "--quiet"]  # fmt: skip
    code, _, stderr = run_cli(args, cwd=tmp_path)
    assert code == 0, stderr
    (run_dir,) = (tmp_path / "runs").iterdir()
    code, out, stderr = run_cli(["eval", str(run_dir), "--device", "cpu", "--episodes", "4",
                                 "--json"], cwd=tmp_path)  # fmt: skip
    assert code == 0, stderr
    result = json.loads(out)
    assert result["num_updates"] == 4 and result["episodes"] == 4 and "eval/avg_reward" in result
    code, _, stderr = run_cli(["export", str(run_dir), "-o", str(tmp_path / "policy.pt2")],
                              cwd=tmp_path)  # fmt: skip
    assert code == 0 and (tmp_path / "policy.pt2").stat().st_size > 1000, stderr
    policy = torch.export.load(str(tmp_path / "policy.pt2")).module()
    assert policy(torch.zeros(3, 6)).shape == (3, 2)  # on the CPU
    code, _, stderr = run_cli(["resume", str(run_dir), "--device", "cpu", "--total-updates", "6",
                               "--quiet"], cwd=tmp_path)  # fmt: skip
    assert code == 0, stderr
    assert "device: cpu" in (run_dir / "config.yaml").read_text()
