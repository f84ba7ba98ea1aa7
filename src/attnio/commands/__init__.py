"""Subcommands of the ``attnio`` CLI, one module each (discovered by :mod:`attnio.cli`)."""
