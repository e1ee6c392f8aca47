"""``python -m pathgrad``: the ``pathgrad`` command (as ``torchrun ... -m pathgrad`` runs it)."""

import sys

from pathgrad.cli import main
from pathgrad.distributed import exit_rank

if __name__ == "__main__":
    code = main()
    exit_rank(code)  # a torchrun rank ends here
    sys.exit(code)
