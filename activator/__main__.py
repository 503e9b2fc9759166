"""`python -P -m tailpilot.activator`: the activator process (`main`)."""

from tailpilot.activator.main import main

raise SystemExit(main())
