"""pathgrad (APG, SHAC, SAPO, AHAC) against Stable-Baselines3 PPO and SAC on the same dynamics.

The model-free baselines train through ``pathgrad.envs.to_sb3`` on exactly the
env the analytic methods differentiate; every method is evaluated the same way
(``evaluate_episodes``: deterministic actions, separate envs, fixed seed) at
regular env-step intervals. Per task the script reports, as medians over
seeds: the final evaluation return, and the env steps and wall time to reach
90% of the way from the untrained return to the best return any method
reached. Writes ``results.json`` and a ``<task>.png`` per task to ``--out``.

Baseline settings (rl-zoo's for Pendulum-v1, used on every task): PPO with 4
envs, n_steps 1024, gamma 0.9, gae_lambda 0.95, 10 epochs, lr 1e-3, clip 0.2,
gSDE (sample frequency 4); SAC with lr 1e-3, otherwise defaults (one env).

Run: ``python benchmarks/baselines.py [--tasks ...] [--methods apg shac sapo ahac ppo sac]
[--seeds 0 1 2] [--jobs 2] [--targets TASK=RETURN ...] [--set KEY=VALUE ... --label TEXT]
[--ppo-steps N] [--sac-steps N] [--baseline-eval-steps N] [--quick]``. ``--set`` adds
config overrides to every first-order run (e.g. fewer envs for sample efficiency) and
``--label`` names that variant in the table; ``--ppo-steps`` / ``--sac-steps`` replace the
tasks' budgets and ``--baseline-eval-steps`` their evaluation interval.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# task -> pathgrad env, the config (and overrides) of each first-order method, PPO and SAC
# env-step budgets, evaluation interval. SAPO-ensemble and AHAC-stiffness take SHAC's
# fields, so a task without a config of its own runs SHAC's (or APG's) config under
# their name. The "sapo" method is pathgrad's earlier SAPO, now `sapo_ensemble`, and the
# "ahac" method its former ahac, now `ahac_stiffness` (docs/benchmarks.md measured them);
# the authors' SAPO (`sapo`) and AHAC (`ahac`) have their own fields.
TASKS = {
    "PointMass": {
        "env": "PointMass",
        "configs": {
            "apg": ("point_mass.yaml", []),
            "sapo": ("point_mass.yaml", ["algorithm.name=sapo_ensemble"]),
            "ahac": ("point_mass.yaml", ["algorithm.name=ahac_stiffness"]),
        },
        "budgets": (200_000, 30_000, 10_000),
    },
    "Reacher": {
        "env": "Reacher",
        "configs": {
            "apg": ("reacher.yaml", []),
            "shac": ("reacher_shac.yaml", []),
            "sapo": ("reacher_shac.yaml", ["algorithm.name=sapo_ensemble"]),
            "ahac": ("reacher_shac.yaml", ["algorithm.name=ahac_stiffness"]),
        },
        "budgets": (300_000, 30_000, 10_000),
    },
    "Pendulum": {
        "env": "Pendulum",
        "configs": {
            "apg": ("pendulum.yaml", []),
            "shac": ("pendulum_shac.yaml", []),
            "sapo": ("pendulum_sapo.yaml", []),
            "ahac": ("pendulum_ahac.yaml", []),
        },
        "budgets": (200_000, 30_000, 10_000),
    },
    "Quadrotor": {
        "env": "Quadrotor",
        "configs": {"apg": ("quadrotor.yaml", [])},
        "budgets": (300_000, 30_000, 10_000),
    },
    "CartPoleSwingUp": {
        "env": "CartPoleSwingUp",
        "configs": {
            "apg": ("cartpole_swingup.yaml", []),
            "shac": ("cartpole_swingup_shac.yaml", []),
            "sapo": ("cartpole_swingup_sapo.yaml", []),
            "ahac": ("cartpole_swingup_ahac.yaml", []),
        },
        "budgets": (300_000, 30_000, 10_000),
    },
}
FIRST_ORDER = ("apg", "shac", "sapo", "ahac")
EVAL_ENVS, EVAL_EPISODES, EVAL_SEED = 16, 16, 12345


def _evaluate(policy, env_name: str, seed: int, transform=None, env_cfg=None) -> float:
    return _evaluate_metrics(policy, env_name, seed, transform, env_cfg)["eval/avg_reward"]


def _evaluate_metrics(policy, env_name: str, seed: int, transform=None, env_cfg=None) -> dict:
    """Every evaluation metric (``eval/avg_reward``, and the env's own: a success rate, a
    distance), as ``pathgrad train`` evaluates: separate envs, a fixed seed."""
    import pathgrad
    from pathgrad.evaluation import PATHGRAD_EVALUATION, evaluate_episodes

    env = pathgrad.build_learning_env(
        env_name, num_envs=EVAL_ENVS, device="cpu", seed=seed + 1, **(env_cfg or {})
    )
    return evaluate_episodes(
        policy,
        env,
        EVAL_EPISODES,
        "cpu",
        seed=EVAL_SEED,
        observation_transform=transform,
        **PATHGRAD_EVALUATION,
    )


def run_pathgrad(task: str, config_name: str, seed: int, overrides: list[str]) -> list[list[float]]:
    from pathgrad.runs.config import load_config
    from pathgrad.runs.run import build_run

    settings = [
        *overrides,
        f"trainer.seed={seed}",
        "trainer.save_frequency_updates=0",
        f"eval.num_envs={EVAL_ENVS}",
        f"eval.episodes={EVAL_EPISODES}",
        f"eval.seed={EVAL_SEED}",
    ]
    config = load_config(ROOT / "configs" / config_name, settings)
    with tempfile.TemporaryDirectory() as run_dir:
        trainer = build_run(config, Path(run_dir)).trainer
        curve: list[list[float]] = []
        clock = {"start": time.time(), "paused": 0.0, "began": 0.0}
        evaluate = trainer._evaluate

        def timed_evaluation(**kwargs: bool) -> dict[str, float]:  # training excludes evals
            clock["began"] = time.time()
            try:
                return evaluate(**kwargs)
            finally:
                clock["paused"] += time.time() - clock["began"]

        def record(kind: str, entry: dict[str, float]) -> None:
            if kind == "eval":
                seconds = clock["began"] - clock["start"] - clock["paused"]
                curve.append([entry["global_step"], seconds, entry["eval/avg_reward"]])

        trainer._evaluate = timed_evaluation
        trainer.callbacks.append(record)
        trainer.train(total_updates=config.trainer.total_updates)
    return curve


class _SB3Policy:
    """A Stable-Baselines3 model behind the Policy interface of ``evaluate_episodes``."""

    def __init__(self, model) -> None:
        self.model = model
        self.training = False

    def eval(self):
        return self

    def train(self, mode: bool = True):
        return self

    def get_action(self, obs, deterministic: bool = True):
        import torch

        action, _ = self.model.predict(obs.cpu().numpy(), deterministic=deterministic)
        return torch.as_tensor(action, dtype=obs.dtype)


def run_sb3(task: str, algorithm: str, seed: int, steps: int, every: int) -> list[list[float]]:
    from stable_baselines3 import PPO, SAC
    from stable_baselines3.common.callbacks import BaseCallback

    import pathgrad

    env_name = TASKS[task]["env"]
    num_envs = 4 if algorithm == "ppo" else 1
    vec_env = pathgrad.envs.to_sb3(
        pathgrad.build_learning_env(env_name, num_envs=num_envs, device="cpu", seed=seed)
    )
    if algorithm == "ppo":
        model = PPO(
            "MlpPolicy",
            vec_env,
            n_steps=1024,
            gamma=0.9,
            gae_lambda=0.95,
            n_epochs=10,
            learning_rate=1e-3,
            clip_range=0.2,
            use_sde=True,
            sde_sample_freq=4,
            seed=seed,
            device="cpu",
        )
    else:
        model = SAC("MlpPolicy", vec_env, learning_rate=1e-3, seed=seed, device="cpu")
    curve: list[list[float]] = []
    start = time.time()

    class Evaluate(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.next_eval = every
            self.paused = 0.0

        def _on_step(self) -> bool:
            if self.num_timesteps >= self.next_eval:
                began = time.time()
                value = _evaluate(_SB3Policy(model), env_name, seed)
                self.paused += time.time() - began
                curve.append([self.num_timesteps, time.time() - start - self.paused, value])
                self.next_eval += every
            return True

    model.learn(total_timesteps=steps, callback=Evaluate())
    return curve


def run_job(job: tuple) -> dict:
    import torch

    torch.set_num_threads(1)
    task, method, seed, quick, settings, label, budgets = job
    ppo_steps, sac_steps, every = TASKS[task]["budgets"]
    ppo_steps, sac_steps = budgets.get("ppo", ppo_steps), budgets.get("sac", sac_steps)
    every = budgets.get("baseline_eval", every)
    if quick:
        ppo_steps, sac_steps, every = 4096, 300, 2048 if method == "ppo" else 150
    start = time.time()
    if method in FIRST_ORDER:
        config, overrides = TASKS[task]["configs"][method]
        overrides = [*overrides, *settings]
        if quick:
            overrides = [*overrides, "trainer.total_updates=2", "eval.frequency_steps=1024"]
        curve = run_pathgrad(task, config, seed, overrides)
    else:
        curve = run_sb3(task, method, seed, ppo_steps if method == "ppo" else sac_steps, every)
    return {
        "task": task,
        "method": method,
        "label": label if method in FIRST_ORDER else "",
        "seed": seed,
        "curve": curve,
        "wall_time": time.time() - start,
    }


def summarize(results: list[dict], targets: dict[str, float] | None = None) -> str:
    """A Markdown table: final return, steps and time to 90% of the best return.

    Steps and time to the mark are medians over seeds, a seed that never
    reached it counting as the slowest; "not reached" when the median seed did not.

    ``targets`` (task -> return) replace the 90% mark computed from these
    results, e.g. to add methods to a table measured before.
    """
    lines = [
        "| task | method | final return (median) | env steps to 90% | wall time to 90% |"
        " total env steps | total wall time |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for task in dict.fromkeys(r["task"] for r in results):
        runs = [r for r in results if r["task"] == task and r["curve"]]
        best = max(point[2] for r in runs for point in r["curve"])
        start = statistics.median(r["curve"][0][2] for r in runs)
        target = (targets or {}).get(task, start + 0.9 * (best - start))
        for method, label in dict.fromkeys((r["method"], r.get("label", "")) for r in runs):
            mine = [r for r in runs if (r["method"], r.get("label", "")) == (method, label)]
            finals = statistics.median(r["curve"][-1][2] for r in mine)
            hits = [next((p for p in r["curve"] if p[2] >= target), None) for r in mine]
            reached = [h for h in hits if h is not None]
            if len(reached) * 2 > len(mine):  # the median run reached it
                never = float("inf")  # a run that did not reach it counts as the slowest
                steps = statistics.median(never if h is None else h[0] for h in hits)
                seconds = statistics.median(never if h is None else h[1] for h in hits)
                note = "" if len(reached) == len(mine) else f" ({len(reached)}/{len(mine)})"
                steps, seconds = f"{steps / 1e3:,.0f}k{note}", f"{seconds:,.0f} s{note}"
            else:
                steps = seconds = f"not reached ({len(reached)}/{len(mine)})"
            total_steps = statistics.median(r["curve"][-1][0] for r in mine)
            total_time = statistics.median(r["wall_time"] for r in mine)
            lines.append(
                f"| {task} | {method.upper()}{label} | {finals:.1f} | {steps} | {seconds} "
                f"| {total_steps / 1e3:,.0f}k | {total_time:,.0f} s |"
            )
        given = task in (targets or {})
        mark = "given" if given else f"90% from {start:.1f} to {best:.1f}"
        lines.append(f"| {task} | target ({mark}) | {target:.1f} | | | | |")
    return "\n".join(lines)


def plot(results: list[dict], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import EngFormatter, LogLocator, NullFormatter

    colors = {
        "apg": "tab:blue", "shac": "tab:red", "sapo": "tab:orange", "ahac": "tab:brown",
        "ppo": "tab:green", "sac": "tab:purple",
    }  # fmt: skip
    for task in dict.fromkeys(r["task"] for r in results):
        figure, axes = plt.subplots(1, 2, figsize=(11, 4))
        mine = [r for r in results if r["task"] == task and r["curve"]]
        for method, color in colors.items():
            variants = dict.fromkeys(r.get("label", "") for r in mine if r["method"] == method)
            for variant, style in zip(variants, ("-", "--", ":", "-."), strict=False):
                runs = [r for r in mine if (r["method"], r.get("label", "")) == (method, variant)]
                for index, run in enumerate(runs):
                    steps, seconds, values = zip(*run["curve"], strict=True)
                    label = method.upper() + variant if index == 0 else None
                    for axis, x in zip(axes, (steps, seconds), strict=True):
                        axis.plot(x, values, color=color, ls=style, alpha=0.7, label=label)
        for axis, label in zip(axes, ("env steps", "wall time (s)"), strict=True):
            axis.set_xscale("log")
            axis.xaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
            axis.xaxis.set_major_formatter(EngFormatter(sep=""))  # 200k, 1M; 20, 100 s
            axis.xaxis.set_minor_formatter(NullFormatter())  # no crowded 2x10^5 labels
            axis.set_xlabel(label + " (log scale)")
            axis.set_ylabel("evaluation return")
            axis.grid(alpha=0.3)
        axes[0].set_title(task)
        axes[0].legend()
        figure.tight_layout()
        figure.savefig(out / f"{task}.png", dpi=110)
        plt.close(figure)


def check_settings(
    parser: argparse.ArgumentParser, tasks: list[str], methods: list[str], settings: list[str]
) -> None:
    """Stop with the config error before any run starts if ``--set`` breaks a config."""
    from pathgrad.runs.config import ConfigError, load_config

    for task in tasks:
        for method in methods:
            config, overrides = TASKS[task]["configs"].get(method, (None, []))
            if config is None:
                continue
            try:
                load_config(ROOT / "configs" / config, [*overrides, *settings])
            except ConfigError as error:
                parser.error(f"--set with {task} {method}: {error}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    methods = [*FIRST_ORDER, "ppo", "sac"]
    parser.add_argument("--methods", nargs="+", default=methods, choices=methods)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("baseline_results"))
    parser.add_argument("--quick", action="store_true", help="tiny budgets, one seed, one task")
    parser.add_argument(
        "--targets", nargs="+", default=[], metavar="TASK=RETURN",
        help="fixed 'to 90%%' returns per task (default: from these results)",
    )  # fmt: skip
    parser.add_argument(
        "--set", nargs="+", default=[], metavar="KEY=VALUE", dest="settings",
        help="config overrides for every first-order run",
    )  # fmt: skip
    parser.add_argument("--label", default="", help="appended to first-order method names")
    parser.add_argument("--ppo-steps", type=int, help="PPO's env-step budget (default: per task)")
    parser.add_argument("--sac-steps", type=int, help="SAC's env-step budget (default: per task)")
    parser.add_argument(
        "--baseline-eval-steps", type=int, metavar="STEPS",
        help="env steps between PPO/SAC evaluations (default: per task)",
    )  # fmt: skip
    args = parser.parse_args()
    if args.label and not args.label.startswith(" "):
        args.label = f" ({args.label})"
    targets = {}
    for item in args.targets:
        task, _, value = item.partition("=")
        if task not in TASKS or not value:
            parser.error(f"--targets takes TASK=RETURN with TASK in {list(TASKS)}, got {item!r}")
        targets[task] = float(value)
    if args.quick:
        args.tasks, args.seeds = ["Pendulum"], [0]
    budgets = {}
    for name in ("ppo", "sac", "baseline_eval"):
        steps = getattr(args, f"{name}_steps")
        if steps is not None:
            if steps <= 0:
                option = name.replace("_", "-")
                parser.error(f"--{option}-steps must be positive, got {steps}")
            budgets[name] = steps
    check_settings(parser, args.tasks, args.methods, args.settings)
    jobs = [
        (task, method, seed, args.quick, args.settings, args.label, budgets)
        for task in args.tasks
        for method in args.methods
        if method not in FIRST_ORDER or method in TASKS[task]["configs"]
        for seed in args.seeds
    ]
    with multiprocessing.get_context("spawn").Pool(args.jobs) as pool:
        results = pool.map(run_job, jobs, chunksize=1)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(results, indent=1))
    plot(results, args.out)
    print(summarize(results, targets))
    print(f"\ncurves: {args.out}/<task>.png, data: {args.out}/results.json")


if __name__ == "__main__":
    main()
