"""Command-line tools beside the Hydra run: `quantkit lint`, `quantkit ledger`, `quantkit sweep`."""
