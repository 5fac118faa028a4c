"""Runs several `zenml` CLI commands in one process (one import of ZenML instead of one per
command): `python zenml_cli_batch.py '[["stack", "list"], ...]'`. Stops at the first failure."""

import json
import sys

from zenml.cli.cli import cli

for args in json.loads(sys.argv[1]):
    print("$ zenml " + " ".join(args), flush=True)
    try:
        cli.main(args=args, prog_name="zenml", standalone_mode=False)
    except SystemExit as e:
        if e.code not in (0, None):
            sys.exit(f"zenml {' '.join(args)} failed (exit {e.code})")
