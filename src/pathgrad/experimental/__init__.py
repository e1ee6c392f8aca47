"""Experimental tasks ported from EmbodiChain's ``embodichain.learning.rl.experimental``.

Nothing is imported here: :mod:`pathgrad.experimental.newton` needs the optional
Newton extra (``pip install 'pathgrad[newton]'``).
"""
