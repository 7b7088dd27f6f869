"""Running the broker from the command line: settings from the flags, the environment and the
file, and every start-up failure as one line (``serve`` and ``cluster join`` share it)."""

from __future__ import annotations

import os
from pathlib import Path

import click

__all__ = ["run_broker"]


def run_broker(config_file: Path | None, **flags: object) -> None:
    from pydantic import ValidationError

    from headrace.persistence.definitions import DefinitionsError
    from headrace.server.app import StartupError, run
    from headrace.server.config import load_settings, unknown_env

    for name in unknown_env(os.environ):  # a typo would otherwise be ignored without a word
        click.echo(f"Warning: {name} is not a headrace setting or variable; ignored", err=True)
    try:
        settings = load_settings(config_file, **flags)
    except (ValidationError, FileNotFoundError, ValueError) as exc:
        raise click.ClickException(f"invalid settings: {exc}") from None
    try:
        run(settings)
    except StartupError as exc:  # a second broker on the data directory, a port in use
        raise click.ClickException(str(exc)) from None
    except DefinitionsError as exc:  # a damaged definitions file: say which, and leave it for the operator
        raise click.ClickException(f"cannot start: {exc}") from None
    except OSError as exc:
        raise click.ClickException(f"cannot start: {exc}") from None
