"""The `statstorm` command: thin click commands over the library.

Each subcommand parses flags into typed options, makes one core call, renders the result and
lets typed errors reach `main()`, which prints one line on stderr and exits with the
documented code (see statstorm.errors).
"""

from __future__ import annotations

import json
import re
import signal
import sys
import threading
from types import FrameType

import click

from statstorm import __version__
from statstorm.env import Env
from statstorm.errors import EXIT_INTERRUPTED, Interrupted, StatstormError, os_error


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


def started(env: Env, verb: str, what: str) -> None:
    """The startup line of a verb that works over time (`statstorm VERB: what it acts on`):
    one plain line on stderr, in a terminal or not, so a cron or CI log says what ran.
    Printed once the options are validated, so a usage error stays the only line."""
    env.log(f"statstorm {verb}: " + re.sub(r"[\r\n]+", " ", what))


class StartedWhenReady(threading.Event):
    """A `ready` event for a core call that sets it when its work really starts (trace: the
    tracer attached): the verb's startup line is printed then, after the target is found
    and the privileges checked, so an error before that stays the only line."""

    def __init__(self, env: Env, verb: str, what: str) -> None:
        super().__init__()
        self._line = (env, verb, what)

    def set(self) -> None:
        if not self.is_set():
            started(*self._line)
        super().set()


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise Interrupted("stopped by SIGTERM")


def load_commands() -> None:
    """Import the subcommand modules; each registers itself on `cli`."""
    from statstorm.cli import (apply, check, demo, exporter, fsbench, lab,  # noqa: F401
                               matrix, report, sweep, trace, whatif)


def _fail(message: str, code: int, as_json: bool) -> None:
    """Exit with `code`; under --json the error is also a JSON object on stdout, so a tool
    that scripts statstorm reads a result either way."""
    if as_json:
        print(json.dumps({"error": message, "exit": code}), flush=True)
    sys.exit(code)


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the CLI and map errors to one line on stderr + an exit code."""
    load_commands()
    as_json = "--json" in (sys.argv[1:] if argv is None else argv)

    signal.signal(signal.SIGTERM, _on_sigterm)
    for stream in (sys.stdout, sys.stderr):  # a path that is not UTF-8, in a UTF-8 locale
        if getattr(stream, "errors", "") == "strict" and hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    try:
        rv = cli.main(args=argv, prog_name="statstorm", standalone_mode=False)
    except (click.exceptions.Abort, KeyboardInterrupt):
        print("statstorm: interrupted", file=sys.stderr)
        _fail("interrupted", EXIT_INTERRUPTED, as_json)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        _fail(exc.format_message(), exc.exit_code, as_json)
    except StatstormError as exc:
        print(f"statstorm: error: {exc}", file=sys.stderr)
        _fail(str(exc), exc.exit_code, as_json)
    except BrokenPipeError:
        sys.exit(0)
    except OSError as exc:  # one a core call did not name itself
        err = os_error(exc)
        print(f"statstorm: error: {err}", file=sys.stderr)
        _fail(str(err), err.exit_code, as_json)
    sys.exit(rv if isinstance(rv, int) else 0)
