"""The logical events the what-if engine (model/php_engine.py) replays: built from a trace by
`model.replay`, one tuple per PHP operation. Pure constants."""

from __future__ import annotations

from typing import Any

# Logical events: tuples whose first item is one of these, second the request id (-1: none).
E_REQ = 0  # (E_REQ, req, "relative" if the CLI's primary script was given relative)
E_PASS = 1  # (E_PASS, req, call, path, failed)
E_REALPATH = 2  # (E_REALPATH, req, path, cwd, mode, before_ini)
E_INCLUDE = 3  # (E_INCLUDE, req, name, once, cwd, include_path, fallback_dir)
E_PROBE = 4  # (E_PROBE, req, name, func, abspath, cwd)
E_CLEAR = 5  # (E_CLEAR, req, realpath, filename)
E_USER_INI = 6  # (E_USER_INI, req, script_dir, dirs)
E_RESOLVE = 7  # (E_RESOLVE, req, name, cwd, include_path, fallback_dir): the primary script
E_CHDIR = 8  # (E_CHDIR, req, succeeded, PHP's chdir()): stat cache; OPcache's getcwd
E_OPC_CLI = 9  # (E_OPC_CLI, req, lock file, script): a CLI run's calls of OPcache itself
PROBE_ONCE = 2  # an E_INCLUDE's `once` when it was enable_file_override's probe's (replay_ops)
# E_BASEDIR = 10: (E_BASEDIR, req, path, cwd), an open_basedir check (model.open_basedir)
E_INI = 11  # (E_INI, req): the script set its include_path (then kept, whatever its value)

Event = tuple[Any, ...]

__all__ = ["E_CHDIR", "E_CLEAR", "E_INCLUDE", "E_INI", "E_OPC_CLI", "E_PASS", "E_PROBE",
           "E_REALPATH", "E_REQ", "E_RESOLVE", "E_USER_INI", "Event", "PROBE_ONCE"]
