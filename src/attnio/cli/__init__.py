"""The ``attnio`` command line (argument parsing and printing; every verb calls the library)."""

from .app import build_parser, main

__all__ = ["build_parser", "main"]
