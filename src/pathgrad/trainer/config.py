"""Configuration of the differentiable trainer (:class:`DifferentiableTrainerCfg`)."""

from __future__ import annotations

from pathgrad.trainer.threads import check_num_threads
from pathgrad.utils import configclass

__all__ = ["DifferentiableTrainerCfg"]


@configclass
class DifferentiableTrainerCfg:
    """Configuration of segmented (TBPTT) or complete graph-preserving training.

    Attributes:
        segment_length: Steps between truncation boundaries (segmented mode).
        update_horizon: Steps per optimizer update (segmented: a multiple of
            ``segment_length``; complete: the rollout length). Defaults to
            ``segment_length``.
        rollout_mode: ``segmented`` (env state carried across updates, graph
            cut every segment) or ``complete`` (each rollout starts from a reset).
        gradient_accumulation_steps: Complete rollouts per update.
        deterministic_actions: Use the policy mean during training.
        clip_actions_to_space: Clamp actions to the action space bounds.
        action_adjoint_max_norm: Per-env clip of the action adjoint (0: off).
        record_gradient_health: Record the action adjoint's mean and largest
            norm across the window and its fraction of non-finite rows every
            update (``train/action_adjoint_*``), without clipping.
        torch_compile: Compile training with ``torch.compile``, as much of it
            as ``compile_scope`` allows: ``compile_chunk_steps`` steps
            (normalization, policy, env step) fused into one compiled region
            (built-in envs and ``GaussianMLPPolicy``); with per-step gradient
            hooks (action adjoint clipping or health record, state-gradient
            decay) or other envs and policies, the env step and policy network
            compiled separately (``compile_step``, ``compile_networks``).
        compile_scope: ``update`` (default): APG's, SHAC's or SAPO's whole
            segmented update compiled: rollout chunks and their backward, the
            clip and Adam/AdamW step as one more compiled program (no Python
            per step), and SHAC's and SAPO's critic minibatch steps compiled
            too; where that cannot be (another algorithm such as AHAC, another
            optimizer, complete mode, per-step hooks) the trainer says why and
            falls back to ``rollout``: compiled rollout chunks, loss and
            optimizer eager.
        compile_chunk_steps: Steps fused into one compiled region; more fuse
            more work and take longer to compile.
        gradient_checkpointing: In complete mode, keep only every
            ``checkpoint_chunk_steps``-th state and recompute the steps between
            during backward: memory of a long rollout shrinks, gradients stay.
        checkpoint_chunk_steps: Steps recomputed together.
        state_gradient_decay: Factor in (0, 1] applied to the carried env
            state's adjoint at every step (1: off); needs an env with a
            ``state_gradient_decay`` attribute (the built-in envs).
        normalize_observations: Keep a running observation normalizer.
        rollout_seed: Seed of the first complete rollout's reset.
        checkpoint_dir: Folder of checkpoints and their index.
        experiment_name: Prefix of checkpoint file names.
        save_frequency_updates: Save every so many updates (0: never).
        keep_last_checkpoints: Keep only this many of the newest periodic
            checkpoints, plus the current best and the newest final one; older
            files are deleted after each save (0: keep every checkpoint).
        eval_frequency_steps: Evaluate every so many env steps (0: never).
        num_eval_episodes: Episodes per evaluation.
        eval_seed: Reset seed of each evaluation.
        use_wandb: Also log to Weights & Biases (``wandb.init`` is the caller's).
        best_eval_metric: Evaluation metric that selects the best checkpoint.
        best_eval_mode: ``max`` or ``min`` of ``best_eval_metric``.
        final_evaluation: Also evaluate the final policy when a budget is
            reached (unless the last evaluation was at that step), saving it
            as the best when it is; the command line turns this on.
        history_length: Entries kept in ``train_history`` and
            ``eval_history`` (the most recent ones), so memory stays flat.
        num_threads: Torch intra-op threads per process (``auto``: see
            :mod:`pathgrad.trainer.threads`).
        max_consecutive_skipped_updates: Stop training after this many
            skipped updates in a row: ``train()`` returns its summary with
            status ``diverged`` (the command line exits 3); 0: never.
        distributed_timeout_seconds: Under ``torchrun``, the longest any
            rank waits for the others at a collective (rendezvous, gradient
            average, evaluation, checkpoint) before failing with an error;
            covers the first compiled update and rank 0's evaluations.
    """

    segment_length: int = 16
    update_horizon: int | None = None
    rollout_mode: str = "segmented"
    gradient_accumulation_steps: int = 1
    deterministic_actions: bool = False
    clip_actions_to_space: bool = False
    action_adjoint_max_norm: float = 0.0
    record_gradient_health: bool = False
    torch_compile: bool = False
    compile_scope: str = "update"
    compile_chunk_steps: int = 8
    gradient_checkpointing: bool = False
    checkpoint_chunk_steps: int = 32
    state_gradient_decay: float = 1.0
    normalize_observations: bool = False
    rollout_seed: int | None = None
    checkpoint_dir: str = "outputs/checkpoints"
    experiment_name: str = "apg"
    save_frequency_updates: int = 0
    keep_last_checkpoints: int = 0
    eval_frequency_steps: int = 0
    num_eval_episodes: int = 5
    eval_seed: int | None = None
    use_wandb: bool = False
    best_eval_metric: str = "eval/avg_reward"
    best_eval_mode: str = "max"
    final_evaluation: bool = False
    history_length: int = 1000
    num_threads: int | str = "auto"
    max_consecutive_skipped_updates: int = 20
    distributed_timeout_seconds: float = 300.0

    def validate(self) -> None:
        """Check every field; raise ``ValueError`` naming the first bad one."""
        if self.segment_length <= 0:
            raise ValueError("segment_length must be positive.")
        update_horizon = self.resolved_update_horizon
        if self.rollout_mode not in {"segmented", "complete"}:
            raise ValueError("rollout_mode must be 'segmented' or 'complete'.")
        if self.rollout_mode == "segmented" and update_horizon < self.segment_length:
            raise ValueError("update_horizon must be at least segment_length.")
        if self.rollout_mode == "segmented" and update_horizon % self.segment_length != 0:
            raise ValueError("update_horizon must be divisible by segment_length.")
        if update_horizon <= 0:
            raise ValueError("update_horizon must be positive.")
        if self.gradient_accumulation_steps <= 0:
            raise ValueError("gradient_accumulation_steps must be positive.")
        if self.action_adjoint_max_norm < 0.0:
            raise ValueError("action_adjoint_max_norm cannot be negative.")
        if not 0.0 < self.state_gradient_decay <= 1.0:
            raise ValueError("state_gradient_decay must be in (0, 1].")
        if self.compile_scope not in {"update", "rollout"}:
            raise ValueError(
                f"compile_scope must be 'update' or 'rollout', got {self.compile_scope!r}."
            )
        if self.compile_chunk_steps <= 0:
            raise ValueError("compile_chunk_steps must be positive.")
        if self.checkpoint_chunk_steps <= 0:
            raise ValueError("checkpoint_chunk_steps must be positive.")
        if self.gradient_checkpointing and self.rollout_mode != "complete":
            raise ValueError("gradient_checkpointing applies to rollout_mode='complete'.")
        if self.save_frequency_updates < 0:
            raise ValueError("save_frequency_updates cannot be negative.")
        if self.keep_last_checkpoints < 0:
            raise ValueError("keep_last_checkpoints cannot be negative (0 keeps every one).")
        if self.eval_frequency_steps < 0:
            raise ValueError("eval_frequency_steps cannot be negative.")
        if self.best_eval_mode not in {"min", "max"}:
            raise ValueError("best_eval_mode must be 'min' or 'max'.")
        if self.history_length <= 0:
            raise ValueError("history_length must be positive.")
        if self.num_eval_episodes <= 0:
            raise ValueError("num_eval_episodes must be positive.")
        if not self.experiment_name:
            raise ValueError("experiment_name must not be empty.")
        if self.max_consecutive_skipped_updates < 0:
            raise ValueError("max_consecutive_skipped_updates cannot be negative (0: no limit).")
        check_num_threads(self.num_threads)
        if not 0.0 < self.distributed_timeout_seconds < float("inf"):
            raise ValueError("distributed_timeout_seconds must be positive and finite.")

    @property
    def resolved_update_horizon(self) -> int:
        """``update_horizon``, or ``segment_length`` when it is unset."""
        return self.segment_length if self.update_horizon is None else self.update_horizon
