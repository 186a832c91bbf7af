"""`python -m gateway …` is the same as the `gateway` console script."""

from gateway.console import main

raise SystemExit(main())
