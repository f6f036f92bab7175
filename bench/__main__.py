"""``python -m bench [--quick] [--json]``: the same as ``forkagent bench`` in a checkout."""

from .run import main

main()
