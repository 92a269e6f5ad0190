"""``python -m rocketq``: the same as the ``rocketq`` command."""

from .cli import main

raise SystemExit(main())
