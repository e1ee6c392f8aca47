"""``python -m pathgrad``: the ``pathgrad`` command (as ``torchrun ... -m pathgrad`` runs it)."""

import sys

from pathgrad.console import main

if __name__ == "__main__":
    sys.exit(main())  # the start-up guard, the command, then a torchrun rank's exit
