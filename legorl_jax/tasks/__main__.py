"""`python -m legorl_jax.tasks ...`: see `legorl_jax.tasks.cli`."""

import sys

from legorl_jax.tasks.cli import main

sys.exit(main())
