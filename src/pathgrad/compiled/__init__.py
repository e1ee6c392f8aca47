"""The ``trainer.torch_compile`` paths: what can be compiled, the compiled APG, SHAC and
SAPO updates and the compiled rollout, equal to the eager ones in float64 (tested)."""
