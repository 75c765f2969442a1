"""The `statstorm` command: thin click commands over the library.

Each subcommand parses flags into typed options, makes one core call, renders the result and
lets typed errors reach `main()`, which prints one line on stderr and exits with the
documented code (see statstorm.errors).
"""

from __future__ import annotations

import signal
import sys
from types import FrameType

import click

from statstorm import __version__
from statstorm.env import Env
from statstorm.errors import EXIT_INTERRUPTED, Interrupted, StatstormError


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="statstorm")
@click.option("-v", "--verbose", is_flag=True, help="Log every command statstorm runs.")
@click.pass_context
def cli(ctx: click.Context, verbose: bool) -> None:
    """Find, explain, fix and prove the file-system cost of PHP web serving.

    \b
    Examples:
      statstorm lab up --app mediawiki --storage glusterfs
      statstorm lab status --json
      statstorm lab down
    """
    ctx.obj = Env(verbose=verbose)


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise Interrupted("stopped by SIGTERM")


def load_commands() -> None:
    """Import the subcommand modules; each registers itself on `cli`."""
    from statstorm.cli import (apply, check, demo, exporter, fsbench, lab,  # noqa: F401
                               matrix, report, sweep, trace, whatif)


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the CLI and map errors to one line on stderr + an exit code."""
    load_commands()

    signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        rv = cli.main(args=argv, prog_name="statstorm", standalone_mode=False)
    except click.exceptions.Abort:
        print("statstorm: interrupted", file=sys.stderr)
        sys.exit(EXIT_INTERRUPTED)
    except KeyboardInterrupt:
        print("statstorm: interrupted", file=sys.stderr)
        sys.exit(EXIT_INTERRUPTED)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except StatstormError as exc:
        print(f"statstorm: error: {exc}", file=sys.stderr)
        sys.exit(exc.exit_code)
    except BrokenPipeError:
        sys.exit(0)
    sys.exit(rv if isinstance(rv, int) else 0)
