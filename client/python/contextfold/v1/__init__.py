"""Generated from protos/contextfold/v1 by `make proto`; do not edit."""
