"""``python -m pathgrad``: the ``pathgrad`` command (as ``torchrun ... -m pathgrad`` runs it)."""

import sys

from pathgrad.cli import main

if __name__ == "__main__":
    sys.exit(main())
