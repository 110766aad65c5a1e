"""`python -m megalab ...` is the `megalab` command."""

from megalab.cli import main

raise SystemExit(main())
