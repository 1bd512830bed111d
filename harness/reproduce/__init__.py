"""Reproduce jobs: one command per paper-style table, at this machine's scale or at paper scale.

* :mod:`harness.reproduce.quickstart`: the main job on the embedded defaults (``make quickstart``);
* :mod:`harness.reproduce.stages`: hashed, skippable, resumable stages shared by every job;
* :mod:`harness.reproduce.report`: tables on stdout, ``tables.md`` and PNG plots, from records.
"""
