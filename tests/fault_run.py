"""Run the ``pathgrad`` command with a fault injected at a chosen instant.

Usage: python fault_run.py FAULT N -- pathgrad-arguments...

FAULT (N counts from 1):
  kill_after_update    SIGKILL once update N is recorded (metrics line written, before its
                       evaluation and save)
  kill_in_replace      SIGKILL at the N-th os.replace: a file (checkpoint, index, metrics,
                       config, summary) is written to its temporary name but not moved
  kill_after_replace   SIGKILL just after the N-th os.replace (e.g. a checkpoint in place,
                       its index entry not yet)
  kill_in_eval         SIGKILL in the middle of the N-th evaluation
  sigterm_in_eval      SIGTERM in the middle of the N-th evaluation (handled: final checkpoint)
  sigint_in_update     SIGINT in the middle of update N's optimizer step (handled)
  kill_in_final_save   SIGKILL when the final checkpoint starts being written
"""

from __future__ import annotations

import os
import signal
import sys

import pathgrad.core.atomic_files
import pathgrad.trainer.evaluation_schedule
from pathgrad.cli import main
from pathgrad.differentiable_trainer import DifferentiableTrainer


def _after(count: int, action):
    calls = {"n": 0}

    def tick() -> None:
        calls["n"] += 1
        if calls["n"] == count:
            action()

    return tick


def kill() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def install(fault: str, count: int) -> None:
    if fault == "kill_after_update":
        record = DifferentiableTrainer._record_update
        tick = _after(count, kill)

        def record_then_maybe_die(self, metrics):
            record(self, metrics)
            tick()

        DifferentiableTrainer._record_update = record_then_maybe_die
    elif fault in ("kill_in_replace", "kill_after_replace"):
        replace = os.replace
        tick = _after(count, kill)

        def faulty_replace(source, target):
            if fault == "kill_in_replace":
                tick()
            replace(source, target)
            if fault == "kill_after_replace":
                tick()

        pathgrad.core.atomic_files.os.replace = faulty_replace
    elif fault in ("kill_in_eval", "sigterm_in_eval"):
        evaluate = pathgrad.trainer.evaluation_schedule.evaluate_episodes
        action = kill if fault == "kill_in_eval" else lambda: os.kill(os.getpid(), signal.SIGTERM)
        tick = _after(count, action)

        def evaluate_with_fault(*args, **kwargs):
            steps = {"n": 0}
            user_step = kwargs.get("on_step")

            def on_step(info):
                steps["n"] += 1
                if steps["n"] == 3:
                    tick()
                if user_step is not None:
                    user_step(info)

            return evaluate(*args, **{**kwargs, "on_step": on_step})

        pathgrad.trainer.evaluation_schedule.evaluate_episodes = evaluate_with_fault
    elif fault == "sigint_in_update":
        build = DifferentiableTrainer.__init__
        tick = _after(count, lambda: os.kill(os.getpid(), signal.SIGINT))

        def build_and_patch(self, *args, **kwargs):
            build(self, *args, **kwargs)
            finish = self.algorithm.finish_update

            def finish_with_signal():
                tick()
                return finish()

            self.algorithm.finish_update = finish_with_signal

        DifferentiableTrainer.__init__ = build_and_patch
    elif fault == "kill_in_final_save":
        save = DifferentiableTrainer.save_checkpoint

        def save_or_die(self, path=None, *, kind="periodic"):
            if kind == "final":
                kill()
            return save(self, path, kind=kind)

        DifferentiableTrainer.save_checkpoint = save_or_die
    else:
        raise SystemExit(f"unknown fault {fault}")


if __name__ == "__main__":
    separator = sys.argv.index("--")
    install(sys.argv[1], int(sys.argv[2]))
    sys.exit(main(sys.argv[separator + 1 :]))
