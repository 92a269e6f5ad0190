"""``python -m rocketq.cli``: the same as the ``rocketq`` command."""

from . import main

raise SystemExit(main())
