"""The command line: ``manage.py workflows`` and its subcommands (``runworkflows`` is in ``management/``)."""
