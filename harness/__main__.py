"""``python -m harness ...`` (also what ``torchrun -m harness`` runs) is the ``primebench`` CLI."""

from harness.cli import main

main(prog_name="primebench")
