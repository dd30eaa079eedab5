"""``manage.py workflows``: look at and act on workflow runs from a terminal (see ``cli/workflows.py``)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from ...cli import workflows as cli


class Command(BaseCommand):
    help = (
        "List, show, start, cancel, retry and signal workflow runs, count them by status, "
        "and prune the finished runs past their retention. Every subcommand takes --json for scripts."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        cli.add_arguments(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        cli.dispatch(options, self.stdout)
