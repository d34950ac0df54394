"""`python -m meshdeck` runs the same CLI as the `meshdeck` script."""

from meshdeck.cli import main

raise SystemExit(main())
