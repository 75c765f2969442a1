"""The `statstorm` command: thin click commands over the library.

Each subcommand parses flags into typed options, makes one core call, renders the result and
lets typed errors reach `main()`, which prints one line on stderr and exits with the
documented code (see statstorm.errors).
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import re
import signal
import sys
import threading
from types import FrameType
from typing import NoReturn

import click

from statstorm import __version__
from statstorm.env import Env
from statstorm.errors import EXIT_INTERRUPTED, Interrupted, StatstormError, os_error


# the verbs, each a module of this package that registers itself on `cli` when imported
VERBS = ("apply", "check", "demo", "doctor", "exporter", "fsbench", "lab", "matrix", "mirror",
         "opcache", "report", "sweep", "trace", "tune", "whatif")


class VerbGroup(click.Group):
    """The top-level group: a verb's module is imported only when that verb runs (or when
    the whole list is asked for: `--help`, the docs, the man pages), so a command starts
    without importing every other verb's libraries."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(VERBS) | set(self.commands))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in VERBS and cmd_name not in self.commands:
            importlib.import_module(f"statstorm.cli.{cmd_name}")
        return super().get_command(ctx, cmd_name)


@click.group(cls=VerbGroup,
             context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
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
    # main() hands in its Env (a test's captured streams and state root); -v turns it verbose
    base = ctx.obj if isinstance(ctx.obj, Env) else Env()
    ctx.obj = dataclasses.replace(base, verbose=verbose or base.verbose)


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
    """Import every verb's module (each registers itself on `cli`), for what walks them all:
    the docs, the man pages. `run` imports only the verb it runs (`VerbGroup`)."""
    for verb in VERBS:
        importlib.import_module(f"statstorm.cli.{verb}")


def _fail(env: Env, message: str, code: int, as_json: bool) -> int:
    """Exit code `code`; under --json the error is also a JSON object on stdout, so a tool
    that scripts statstorm reads a result either way."""
    if as_json:
        print(json.dumps({"error": message, "exit": code}), file=env.stdout, flush=True)
    return code


def run(argv: list[str] | None = None, env: Env | None = None) -> int:
    """Run the CLI on `argv` (default: the process's arguments) in `env` (default: the real
    streams, clock and state root) and return the exit code; every error becomes one line on
    `env.stderr`. Tests call this (through `main`) in-process with captured streams."""
    env = env or Env()
    args = sys.argv[1:] if argv is None else list(argv)
    as_json = "--json" in args

    for stream in (env.stdout, env.stderr):  # a path that is not UTF-8, in a UTF-8 locale
        if getattr(stream, "errors", "") == "strict" and hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    try:
        rv = cli.main(args=args, prog_name="statstorm", standalone_mode=False, obj=env)
    except (click.exceptions.Abort, KeyboardInterrupt):
        print("statstorm: interrupted", file=env.stderr)
        return _fail(env, "interrupted", EXIT_INTERRUPTED, as_json)
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.ClickException as exc:
        exc.show(file=env.stderr)
        return _fail(env, exc.format_message(), exc.exit_code, as_json)
    except StatstormError as exc:
        print(f"statstorm: error: {exc}", file=env.stderr)
        return _fail(env, str(exc), exc.exit_code, as_json)
    except BrokenPipeError:
        return 0
    except OSError as exc:  # one a core call did not name itself
        err = os_error(exc)
        print(f"statstorm: error: {err}", file=env.stderr)
        return _fail(env, str(err), err.exit_code, as_json)
    return rv if isinstance(rv, int) else 0


def main(argv: list[str] | None = None, env: Env | None = None) -> NoReturn:
    """Entry point: run the CLI (see `run`) with SIGTERM raising `Interrupted`, so clean-up
    runs as for Ctrl-C, and exit with its code."""
    signal.signal(signal.SIGTERM, _on_sigterm)
    sys.exit(run(argv, env))
