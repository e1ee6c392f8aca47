"""SHAC (Xu et al., ICLR 2022) on a Newton robot, in one file, top to bottom.

Short-Horizon Actor-Critic backpropagates through the differentiable simulator over a
short window of ``h`` steps and closes the window with a learned critic:

    actor loss  = -mean_envs[ sum_t gamma^t r_t + gamma^h V_target(s_h) ] / h
    critic loss = (V(s_t) - TD(lambda) target_t)^2,  target critic = Polyak average of V

The discount restarts where an episode ends inside the window: a truncated episode is
bootstrapped from its pre-reset observation (``info["final_observation"]``), a
terminated one is not. ``env.detach_state()`` cuts the graph between windows.

Run (about 1 s per iteration with 64 envs on one CPU thread; Warp's first kernel build
takes about 30 s and is cached)::

    python examples/shac_newton.py --env DiffRLHopper --iterations 200
    python examples/shac_newton.py --env DiffRLHopper --iterations 200 --eval

What to expect: the reward per step and the mean return of the last ``--num-envs`` finished
episodes climb as the hopper learns to stay up and hop forward. Measured on a 2-core CPU with
``OMP_NUM_THREADS=1 python examples/shac_newton.py --env DiffRLHopper --iterations 200
--threads 1 --eval`` (defaults: 64 envs, 32-step windows, seed 0; 205 s in all): iteration 10
printed reward/step 1.34, episode return 152; iteration 100: 3.59, 2518; iteration 200:
4.33, 3337; deterministic evaluation (each env's first episode, at most 1000 steps): 4252.

pathgrad's production SHAC (the paper's 256 envs, learning-rate decay, checkpoints,
evaluation, logging) is ``pathgrad train configs/diffrl_hopper_shac.yaml``.
"""

from __future__ import annotations

import argparse
import copy
import time

import torch
from torch import nn

from pathgrad.env import build_learning_env


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env", default="DiffRLHopper", help="a Newton env (`pathgrad envs`)")
    p.add_argument("--num-envs", type=int, default=64)
    p.add_argument("--iterations", type=int, default=200, help="windows, one update each")
    p.add_argument("--horizon", type=int, default=32, help="window length h")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    p.add_argument("--gamma", type=float, default=0.99)
    p.add_argument("--lam", type=float, default=0.95, help="TD(lambda) of the critic targets")
    p.add_argument("--actor-lr", type=float, default=2e-3)
    p.add_argument("--critic-lr", type=float, default=5e-4)
    p.add_argument("--critic-epochs", type=int, default=16)
    p.add_argument("--critic-minibatches", type=int, default=4)
    p.add_argument("--target-alpha", type=float, default=0.2, help="Polyak: keep this much")
    p.add_argument("--max-grad-norm", type=float, default=1.0)
    p.add_argument("--init-log-std", type=float, default=-1.0)
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--eval", action="store_true", help="deterministic episodes at the end")
    return p.parse_args(argv)


class RunningMeanStd:
    """Observation normalizer: running mean and variance (Chan's parallel merge)."""

    def __init__(self, dim: int) -> None:
        self.mean, self.var, self.count = torch.zeros(dim), torch.ones(dim), 1e-4

    def update(self, x: torch.Tensor) -> None:
        x = x.reshape(-1, x.shape[-1]).double()
        n, mean, var = x.shape[0], x.mean(0), x.var(0, unbiased=False)
        delta, total = mean - self.mean, self.count + n
        m2 = self.var * self.count + var * n + delta.square() * self.count * n / total
        self.mean, self.var, self.count = self.mean + delta * n / total, m2 / total, total

    def __call__(self, x: torch.Tensor) -> torch.Tensor:  # differentiable in x
        return (x - self.mean.float()) / (self.var.float() + 1e-8).sqrt()


def mlp(inputs: int, hidden: list[int], outputs: int) -> nn.Sequential:
    """ELU MLP with a LayerNorm after every hidden layer (as DiffRL's actor and critic)."""
    layers: list[nn.Module] = []
    for width in hidden:
        layers += [nn.Linear(inputs, width), nn.ELU(), nn.LayerNorm(width)]
        inputs = width
    return nn.Sequential(*layers, nn.Linear(inputs, outputs))


class Actor(nn.Module):
    """Gaussian MLP policy, tanh-squashed into the action box; sampling is reparameterized
    (a = tanh(mu + std * eps)), so the simulator's gradient reaches mu and std."""

    def __init__(self, obs_dim: int, low: torch.Tensor, high: torch.Tensor, log_std: float):
        super().__init__()
        self.mu = mlp(obs_dim, [128, 64, 32], low.numel())
        self.log_std = nn.Parameter(torch.full((low.numel(),), log_std))
        self.register_buffer("center", (high + low) / 2)
        self.register_buffer("scale", (high - low) / 2)

    def forward(self, obs: torch.Tensor, deterministic: bool = False) -> torch.Tensor:
        mu = self.mu(obs)
        if not deterministic:
            mu = mu + self.log_std.exp() * torch.randn_like(mu)
        return self.center + self.scale * torch.tanh(mu)


def td_lambda(rewards, next_values, terminated, dones, gamma: float, lam: float):
    """TD(lambda) targets [T, N]: G_t = r_t + gamma ((1 - lam) V'_t + lam G_{t+1}), with
    G_t = r_t + gamma V'_t at episode ends and the window's end; V' = 0 after termination."""
    next_values = torch.where(terminated, 0.0, next_values)
    targets, following = torch.empty_like(rewards), next_values[-1]
    for t in reversed(range(rewards.shape[0])):
        cut = dones[t] | (t == rewards.shape[0] - 1)
        mixed = (1 - lam) * next_values[t] + lam * following
        targets[t] = following = rewards[t] + gamma * torch.where(cut, next_values[t], mixed)
    return targets


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    env = build_learning_env(args.env, num_envs=args.num_envs, device="cpu", seed=args.seed)
    obs_dim = env.single_observation_space.shape[0]
    space = env.single_action_space
    low, high = torch.as_tensor(space.low), torch.as_tensor(space.high)

    actor = Actor(obs_dim, low, high, args.init_log_std)
    critic = mlp(obs_dim, [64, 64], 1)
    target_critic = copy.deepcopy(critic).requires_grad_(False)
    actor_opt = torch.optim.Adam(actor.parameters(), args.actor_lr, betas=(0.7, 0.95))
    critic_opt = torch.optim.Adam(critic.parameters(), args.critic_lr, betas=(0.7, 0.95))
    normalize = RunningMeanStd(obs_dim)
    initial_actor = copy.deepcopy(actor.state_dict())
    gamma, h, N = args.gamma, args.horizon, env.num_envs

    obs, _ = env.reset(seed=args.seed)
    episode_return, finished, history = torch.zeros(N), [], []
    start = time.time()
    for iteration in range(1, args.iterations + 1):
        # --- 1. Actor: a window of h steps that keeps the simulator's autograd graph.
        obs = env.detach_state()  # truncation boundary: no gradient into earlier windows
        window = {key: [] for key in ("obs", "reward", "terminated", "done", "final_obs")}
        actions = []
        objective, discount = torch.zeros(N), torch.ones(N)
        for t in range(h):
            action = actor(normalize(obs))
            action.retain_grad()  # only to report |dJ/da|; SHAC does not need it
            actions.append(action)
            next_obs, reward, terminated, truncated, info = env.step(action)
            done, final_obs = terminated | truncated, info["final_observation"]
            # Bootstrap with the target critic where the episode is cut, not ended: at a
            # truncation, and at the window's end. Gradient flows through final_obs.
            cut = (truncated | (t == h - 1)) & ~terminated
            value = target_critic(normalize(final_obs)).squeeze(-1)
            objective = objective + discount * (reward + gamma * torch.where(cut, value, 0.0))
            discount = torch.where(done, 1.0, discount * gamma)  # restarts after an end
            for key, item in zip(window, (obs, reward, terminated, done, final_obs), strict=True):
                window[key].append(item.detach())
            episode_return = episode_return + reward.detach()
            finished += episode_return[done].tolist()
            episode_return = torch.where(done, 0.0, episode_return)
            obs = next_obs

        actor_loss = -objective.mean() / h
        actor_opt.zero_grad()
        actor_loss.backward()  # through the policy, the simulator and the target critic
        action_grad = torch.stack([a.grad for a in actions]).norm().item()
        grad_norm = nn.utils.clip_grad_norm_(actor.parameters(), args.max_grad_norm).item()
        actor_opt.step()

        # --- 2. Critic: regress TD(lambda) targets of the window (no graph from here on).
        data = {key: torch.stack(items) for key, items in window.items()}  # [h, N, ...]
        normalize.update(data["obs"])
        with torch.no_grad():
            next_values = target_critic(normalize(data["final_obs"])).squeeze(-1)
            targets = td_lambda(
                data["reward"], next_values, data["terminated"], data["done"], gamma, args.lam
            ).reshape(-1)
            inputs = normalize(data["obs"]).reshape(h * N, obs_dim)
        batch = max(1, h * N // args.critic_minibatches)
        for _ in range(args.critic_epochs):
            order = torch.randperm(h * N)
            for first in range(0, h * N - batch + 1, batch):
                index = order[first : first + batch]
                critic_loss = (critic(inputs[index]).squeeze(-1) - targets[index]).square().mean()
                critic_opt.zero_grad()
                critic_loss.backward()
                nn.utils.clip_grad_norm_(critic.parameters(), args.max_grad_norm)
                critic_opt.step()

        # --- 3. Target critic follows the critic (Polyak averaging).
        with torch.no_grad():
            for target, source in zip(target_critic.parameters(), critic.parameters(), strict=True):
                target.lerp_(source, 1.0 - args.target_alpha)

        history.append({
            "actor_loss": actor_loss.item(), "critic_loss": critic_loss.item(),
            "reward": data["reward"].mean().item(), "grad_norm": grad_norm,
            "action_grad_norm": action_grad,
        })  # fmt: skip
        if iteration % args.log_every == 0 or iteration == args.iterations:
            recent = finished[-N:]
            episodes = f"{sum(recent) / len(recent):8.2f}" if recent else "     n/a"
            print(
                f"iter {iteration:4d}  steps {iteration * h * N:7d}  "
                f"reward/step {history[-1]['reward']:6.3f}  episode return {episodes}  "
                f"actor loss {actor_loss.item():7.3f}  critic loss {critic_loss.item():7.3f}  "
                f"|dJ/da| {action_grad:.2e}  {time.time() - start:5.0f}s",
                flush=True,
            )
    result = {"actor": actor, "initial_actor": initial_actor, "critic": critic,
              "history": history, "episode_returns": finished}  # fmt: skip
    if args.eval:
        result["eval_return"] = evaluate(env, actor, normalize, args.seed + 1)
        print(f"eval: deterministic episode return {result['eval_return']:.2f}")
    return result


@torch.no_grad()
def evaluate(env, actor: Actor, normalize: RunningMeanStd, seed: int) -> float:
    """Mean return of every env's first episode with the mean action (no noise)."""
    obs, _ = env.reset(seed=seed)
    total, alive = torch.zeros(env.num_envs), torch.ones(env.num_envs, dtype=torch.bool)
    for _ in range(getattr(env, "max_episode_steps", 1000)):
        obs, reward, terminated, truncated, _ = env.step(actor(normalize(obs), True))
        total += torch.where(alive, reward, 0.0)
        alive &= ~(terminated | truncated)
        if not alive.any():
            break
    return total.mean().item()


if __name__ == "__main__":
    main()
