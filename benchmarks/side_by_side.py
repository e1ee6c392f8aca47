"""pathgrad against minimal hand-written loops and Brax's APG on the same Pendulum dynamics.

Gymnasium's Pendulum dynamics everywhere (pathgrad's ``Pendulum``; for Brax the
same equations in JAX below), 32-step windows, MLP 64x64 (ELU), Adam, gradient
clipping, one thread per framework (``torch.set_num_threads(1)``; XLA's CPU
client with Eigen's multi-threading off). Two hand-written loops: one in plain
PyTorch with the dynamics inline (what pathgrad's env, policy and trainer
together are measured against) and one on pathgrad's env and policy (the
trainer's overhead alone). All contenders run alternating, ``--repeats`` runs
each, medians reported, so that the machine's drift over minutes hits all
alike: a PyTorch run is ``--updates`` updates; a Brax run
(``brax.training.agents.apg``) trains ``--brax-epochs`` epochs of
``--brax-updates`` updates, the first paying the JIT compile, and its rate is
the median of the others as Brax computes it (``training/sps``). Brax epochs
are long on purpose: each also pays a fixed ~0.8 s on this machine whatever its
length (at 20 updates per epoch Brax measured 46k env-steps/s at 64 envs, at
300 updates 322k), and a long epoch is how Brax is used. Compile and JIT times
are printed. Brax needs the ``bench`` extra (``pip install -e '.[bench]'``);
without it, or with ``--no-brax``, the PyTorch contenders run alone.

Run: ``python benchmarks/side_by_side.py [--num-envs 16 64 256 1024]
[--updates 20] [--repeats 5] [--chunk-steps 8 [32]] [--brax-updates 300]
[--brax-epochs 2] [--plot docs/img/side_by_side.png]
[--no-brax] [--quick]``
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import time

# One XLA CPU thread, set before jax is imported anywhere.
os.environ.setdefault(
    "XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
)

import overhead  # noqa: E402  (benchmarks/overhead.py: the loop and trainer contenders)
import torch  # noqa: E402

WINDOW = 32
EPISODE_LENGTH = 200
BRAX = "Brax APG (XLA CPU)"


def minimal_loop(num_envs: int, window: int, updates: int, seed: int) -> float:
    """Seconds for APG updates on Pendulum written in plain PyTorch, no pathgrad at all.

    The same semantics as pathgrad's: torque clipped to +-2, time limit 200 with
    auto-reset to a fresh draw, discount restarted at done, Gaussian actions
    with a learned log-std, gradient clipped to norm 1, Adam, state detached
    after each window.
    """
    torch.manual_seed(seed)
    network = torch.nn.Sequential(
        torch.nn.Linear(3, 64), torch.nn.ELU(), torch.nn.Linear(64, 64), torch.nn.ELU(),
        torch.nn.Linear(64, 1),
    )  # fmt: skip
    log_std = torch.nn.Parameter(torch.full((1,), -0.5))
    parameters = [*network.parameters(), log_std]
    optimizer = torch.optim.Adam(parameters, lr=overhead.LEARNING_RATE)

    def draw() -> tuple[torch.Tensor, torch.Tensor]:
        return torch.rand(num_envs) * 2 * math.pi - math.pi, torch.rand(num_envs) * 2 - 1

    th, thdot = draw()
    elapsed = torch.zeros(num_envs, dtype=torch.long)
    start = time.perf_counter()
    for _ in range(updates):
        optimizer.zero_grad(set_to_none=True)
        discount = torch.ones(num_envs)
        returns = torch.zeros(num_envs)
        for _ in range(window):
            observation = torch.stack([th.cos(), th.sin(), thdot], dim=-1)
            noise = torch.randn(num_envs, 1)
            torque = (network(observation) + log_std.exp() * noise)[:, 0].clamp(-2.0, 2.0)
            angle = torch.remainder(th + math.pi, 2 * math.pi) - math.pi
            reward = -(angle**2 + 0.1 * thdot**2 + 0.001 * torque**2)
            thdot = (thdot + (15.0 * th.sin() + 3.0 * torque) * 0.05).clamp(-8.0, 8.0)
            th = th + thdot * 0.05
            elapsed = elapsed + 1
            done = elapsed >= EPISODE_LENGTH
            fresh_th, fresh_thdot = draw()
            th, thdot = torch.where(done, fresh_th, th), torch.where(done, fresh_thdot, thdot)
            elapsed = torch.where(done, 0, elapsed)
            returns = returns + discount * reward
            discount = torch.where(done, torch.ones_like(discount), discount * overhead.GAMMA)
        (-returns.mean()).backward()
        torch.nn.utils.clip_grad_norm_(parameters, overhead.MAX_GRAD_NORM)
        optimizer.step()
        th, thdot = th.detach(), thdot.detach()
    return time.perf_counter() - start


def torch_contenders(chunk_steps: list[int]) -> dict:
    """Name -> run(num_envs, window, updates, seed) -> seconds.

    One compiled-update contender per chunk size (``trainer.compile_chunk_steps``);
    the compiled rollout with the first.
    """
    overhead.ENV_NAME = "pendulum"
    contenders = {
        "minimal PyTorch loop": minimal_loop,
        "hand-written loop on pathgrad's env and policy": overhead.hand_written_loop,
        "pathgrad eager": overhead.pathgrad_trainer,
        "pathgrad compiled rollout": overhead.pathgrad_compiled(chunk_steps[0], "rollout"),
    }
    for chunk in chunk_steps:
        name = "pathgrad compiled update" + (
            f" ({chunk}-step chunks)" if len(chunk_steps) > 1 else ""
        )
        contenders[name] = overhead.pathgrad_compiled(chunk, "update")
    return contenders


def brax_pendulum():
    """Gymnasium's Pendulum as a Brax env (actions in [-1, 1] scaled to +-2 N m)."""
    import jax
    import jax.numpy as jnp
    from brax.envs.base import Env, State

    g, m, length, dt, max_speed, max_torque = 10.0, 1.0, 1.0, 0.05, 8.0, 2.0

    def observe(q):
        return jnp.stack([jnp.cos(q[0]), jnp.sin(q[0]), q[1]])

    class Pendulum(Env):
        def reset(self, rng):
            low, high = jnp.array([-jnp.pi, -1.0]), jnp.array([jnp.pi, 1.0])
            q = jax.random.uniform(rng, (2,), minval=low, maxval=high)
            zero = jnp.zeros(())
            return State(pipeline_state=q, obs=observe(q), reward=zero, done=zero)

        def step(self, state, action):
            th, thdot = state.pipeline_state
            torque = jnp.clip(action[0] * max_torque, -max_torque, max_torque)
            angle = (th + jnp.pi) % (2 * jnp.pi) - jnp.pi
            cost = angle**2 + 0.1 * thdot**2 + 0.001 * torque**2
            acceleration = 3 * g / (2 * length) * jnp.sin(th) + 3.0 / (m * length**2) * torque
            thdot = jnp.clip(thdot + acceleration * dt, -max_speed, max_speed)
            q = jnp.stack([th + thdot * dt, thdot])
            return state.replace(pipeline_state=q, obs=observe(q), reward=-cost)

        @property
        def observation_size(self):
            return 3

        @property
        def action_size(self):
            return 1

        @property
        def backend(self):
            return "jax"

    return Pendulum()


def brax_apg(num_envs: int, updates: int, epochs: int) -> tuple[float, float]:
    """Median env-steps/s of Brax APG epochs after the first, and the JIT seconds."""
    import functools

    from brax.training.agents.apg import networks, train

    epoch_times: list[float] = []

    def progress(_, metrics):
        if "training/walltime" in metrics:
            epoch_times.append(float(metrics["training/walltime"]))

    train.train(
        environment=brax_pendulum(),
        episode_length=EPISODE_LENGTH,
        policy_updates=updates * epochs,
        horizon_length=WINDOW,
        num_envs=num_envs,
        num_evals=epochs + 1,
        num_eval_envs=16,
        learning_rate=1e-3,
        max_gradient_norm=1.0,
        network_factory=functools.partial(
            networks.make_apg_networks, hidden_layer_sizes=(64, 64), layer_norm=False
        ),
        progress_fn=progress,
    )
    ends = [0.0, *epoch_times]
    seconds = [ends[index + 1] - ends[index] for index in range(len(epoch_times))]
    steady = statistics.median(seconds[1:]) if len(seconds) > 1 else seconds[0]
    return num_envs * WINDOW * updates / steady, seconds[0] - steady


def brax_contender(brax_updates: int, epochs: int, jit_seconds: dict[int, float]):
    """A contender: Brax APG trained afresh (its JIT included), timed on its steady epochs.

    Returns the seconds that ``updates`` updates take at the steady epochs'
    rate, so that Brax alternates with the PyTorch runs; the JIT seconds of the
    last run per batch size go into ``jit_seconds``.
    """

    def run(num_envs: int, window: int, updates: int, seed: int) -> float:
        rate, jit_seconds[num_envs] = brax_apg(num_envs, brax_updates, epochs)
        return num_envs * window * updates / rate

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-envs", type=int, nargs="+", default=[16, 64, 256, 1024])
    parser.add_argument("--updates", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--chunk-steps",
        type=int,
        nargs="+",
        default=[8],
        help="compiled chunk sizes (one row each)",
    )
    parser.add_argument("--brax-updates", type=int, default=300, help="updates per Brax epoch")
    parser.add_argument(
        "--brax-epochs", type=int, default=2, help="Brax epochs per run (first: JIT)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--plot", help="write a log-log plot of env-steps/s against envs here")
    parser.add_argument("--no-brax", action="store_true", help="the PyTorch contenders only")
    parser.add_argument("--quick", action="store_true", help="a few short runs (for tests)")
    args = parser.parse_args()
    if args.quick:
        args.updates, args.repeats, args.num_envs = 2, 1, [16]
        args.brax_updates, args.brax_epochs = 2, 2
    use_brax = not args.no_brax
    if use_brax:
        try:
            import brax  # noqa: F401
        except ImportError:
            print("brax is not installed (pip install -e '.[bench]'): PyTorch contenders only")
            use_brax = False
    torch.set_num_threads(1)
    contenders = torch_contenders(args.chunk_steps)
    pathgrad_paths = [name for name in contenders if name.startswith("pathgrad")]
    jit_seconds: dict[int, float] = {}
    if use_brax:
        contenders[BRAX] = brax_contender(args.brax_updates, args.brax_epochs, jit_seconds)
    names = [*contenders, *(["fastest pathgrad / Brax"] if use_brax else [])]
    print(
        f"Pendulum, {WINDOW}-step windows, MLP 64x64, median of {args.repeats} alternating "
        f"runs ({args.updates} updates; Brax: {args.brax_epochs} epochs of "
        f"{args.brax_updates} updates, the first its JIT), one thread, torch "
        f"{torch.__version__}; env-steps/s (ratio to the minimal PyTorch loop)"
    )
    print()
    print("| envs | " + " | ".join(names) + " |")
    print("|---:|" + "---:|" * len(names))
    results: dict[str, list[float]] = {name: [] for name in contenders}
    for num_envs in args.num_envs:
        medians = overhead.median_rates(
            contenders, num_envs, WINDOW, args.updates, args.repeats, args.seed,
            warm_up=[name for name in contenders if name != BRAX],
        )  # fmt: skip
        base = medians["minimal PyTorch loop"]
        cells = [f"{medians[name]:,.0f} ({medians[name] / base:.2f})" for name in contenders]
        if use_brax:
            cells.append(f"{max(medians[name] for name in pathgrad_paths) / medians[BRAX]:.2f}")
        print(f"| {num_envs} | " + " | ".join(cells) + " |", flush=True)
        for name in contenders:
            results[name].append(medians[name])
    print()
    for (_, num_envs, chunk, scope), seconds in overhead.COMPILE_SECONDS.items():
        print(f"torch.compile {scope}, {num_envs} envs, {chunk}-step chunks: {seconds:.1f} s")
    for num_envs, seconds in jit_seconds.items():
        print(f"Brax JIT (first epoch less a steady one), {num_envs} envs: {seconds:.1f} s")
    if args.plot:
        plot(args.num_envs, results, args.plot)


def plot(num_envs: list[int], results: dict[str, list[float]], path: str) -> None:
    """Env-steps/s against the batch size, log-log."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    figure, axes = plt.subplots(figsize=(6.4, 4.2))
    for name, rates in results.items():
        axes.plot(num_envs, rates, marker="o", label=name)
    axes.set_xscale("log", base=2)
    axes.set_yscale("log")
    axes.set_xticks(num_envs, [str(n) for n in num_envs])
    axes.yaxis.set_major_formatter(
        FuncFormatter(lambda value, _: f"{value / 1000:,.0f}k" if value >= 1000 else f"{value:g}")
    )
    axes.set_xlabel("parallel envs")
    axes.set_ylabel("env-steps/s (forward + backward + update)")
    axes.set_title("APG on Pendulum, 32-step windows, one CPU thread")
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    print(f"plot: {path}")


if __name__ == "__main__":
    main()
