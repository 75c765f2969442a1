"""The report's environment section (what each result ran on: settings as the pool saw them,
mounts and their options, tools) and the command that re-makes each result file, rebuilt
from what the file holds. Pure functions of the files' data.
"""

from __future__ import annotations

import re
import shlex
from typing import Any

from statstorm.report.sections import Section, Table
from statstorm.results.fsbench import FsbenchResult, mount_facts
from statstorm.results.matrix import MatrixResult
from statstorm.results.provenance import Provenance
from statstorm.results.sweep import SweepResult
from statstorm.results.whatif import WhatifResult

# a result read by its class; None for the kinds the report still reads by key
Typed = SweepResult | FsbenchResult | MatrixResult | WhatifResult | None

# the settings that decide PHP's file-metadata calls, shown first; the rest in a details block
KEY_SETTINGS = ("realpath_cache_size", "realpath_cache_ttl", "open_basedir", "include_path",
                "opcache.enable", "opcache.validate_timestamps", "opcache.revalidate_freq",
                "opcache.revalidate_path", "opcache.enable_file_override",
                "opcache.huge_code_pages", "user_ini.filename", "user_ini.cache_ttl",
                "pm.max_requests", "pm.max_children")


def _q(args: list[str]) -> str:
    return " ".join(shlex.quote(str(a)) for a in args)


def _lab_name(description: str) -> str:
    m = re.match(r"lab (\S+)", description or "")
    return m.group(1) if m else ""


def whatif_command(name: str, w: WhatifResult) -> str:
    sets = [x for k, v in w.changes for x in ("--set", f"{k}={v}")]
    prof = w.profile_source
    prof_arg = ["--profile", prof] if prof in ("local", "gluster", "gluster-tuned", "trace") \
        else []
    return _q(["statstorm", "whatif", "TRACE", *sets, *prof_arg, "--json"]) + f" > {name}"


def fsbench_command(name: str, f: FsbenchResult) -> str:
    run = (["--iterations", str(f.iterations)] if f.iterations
           else ["-d", f"{f.duration_s:g}"] if f.duration_s else [])
    extra = ["--max-files", str(f.max_files)] if f.max_files else []
    return _q(["statstorm", "fsbench", "--ops", ",".join(f.ops), "--clients", str(f.clients),
               *run, *extra, "-o", name, *f.paths])


def sweep_command(name: str, s: SweepResult) -> str:
    o = s.options
    flag = "-c" if s.model == "closed" else "--rate"
    levels = ",".join(f"{float(x):g}" for x in o.levels)
    return _q(["statstorm", "sweep", s.target, flag, levels, "-d", f"{o.duration_s:g}",
               "--repeats", str(o.repeats), "--tool", s.tool, *(["--trace"] if o.trace else []),
               "-o", name])


def command(kind: str, name: str, data: dict[str, Any], result: Typed = None) -> str:
    """The statstorm command line that writes a file like this one (as far as it tells):
    the one it names (results.provenance), else rebuilt from what it holds (`result`: the
    file read by its class, for the kinds that have one)."""
    given = Provenance.from_json(data)
    if given.command is not None:
        return given.command_line()
    if isinstance(result, WhatifResult):
        return whatif_command(name, result)
    if isinstance(result, FsbenchResult):
        return fsbench_command(name, result)
    if isinstance(result, SweepResult):
        return sweep_command(name, result)
    if isinstance(result, MatrixResult):
        return "statstorm matrix … -o " + shlex.quote(name)
    if kind == "trace":
        t = data.get("targets") or {}
        trailer = data.get("_trailer") or {}
        target = (["--lab", _lab_name(t.get("description", ""))] if t.get("mode") == "lab"
                  else ["--pool", str(t["pool"])] if t.get("pool")
                  else [x for p in t.get("pids") or [] for x in ("-p", str(p))])
        if data.get("source") == "strace-c":
            return _q(["statstorm", "trace", "import", "STRACE-LOG", "-o", name])
        stop = (["--requests", str(trailer["completed_requests"])]
                if trailer.get("stopped") == "requests" and trailer.get("completed_requests")
                else [])
        counts = ["--counts"] if data.get("detail") == "counts" else []
        return _q(["statstorm", "trace", *target, *stop, *counts, "-o", name])
    if kind == "check":
        pools = [x for p in data.get("pools") or [] for x in ("--pool", str(p.get("pool")))]
        return _q(["statstorm", "check", *pools, "--trace", "TRACE", "--json"]) + f" > {name}"
    if kind == "apply":
        t = data.get("target") or {}
        target = ["--lab", t["lab"]] if t.get("lab") else ["--pool", str(t.get("pool", "POOL"))]
        ids = sorted({str(c.get("finding")) for c in data.get("changes") or []})
        verify = ["--verify"] if data.get("verify") else []
        return _q(["statstorm", "apply", *target, *ids, "--yes", *verify, "--json"]) + \
            f" > {name}"
    if kind == "demo":
        rounds = len(((data.get("before") or {}).get("local") or {}).get("rounds") or []) or 3
        return _q(["statstorm", "demo", "--app", str(data.get("app")), "--storage",
                   str(data.get("storage")), "--rounds", str(rounds), "-o",
                   str(data.get("output_dir", "statstorm-demo"))])
    if kind == "trace-summary":
        return _q(["statstorm", "trace", "show", "TRACE", "--json"]) + f" > {name}"
    return ""


def _settings_table(caption: str, settings: dict[str, Any]) -> tuple[Table, str]:
    rows = [(k, str(settings[k])) for k in KEY_SETTINGS if k in settings]
    rest = "\n".join(f"{k} = {v}" for k, v in sorted(settings.items()) if k not in KEY_SETTINGS)
    return Table(caption, ("setting", "value"), rows, numeric=False), rest


def environment(files: list[tuple[str, str, dict[str, Any], Typed]]) -> Section:
    """`files`: (kind, label, data, the data read by its class) of every result file."""
    sec = Section("environment", "Environment")
    for kind, name, d, result in files:
        if isinstance(result, FsbenchResult):
            rows = [(mp, fstype, source, ", ".join(f"{k}={v}" for k, v in cache.items()))
                    for mp, fstype, source, cache in (mount_facts(m) for m in result.mounts
                                                      if isinstance(m, dict))]
            if rows:
                sec.tables.append(Table(f"{name}: mounts benchmarked", ("mount point", "type",
                                                                         "source", "cache options"),
                                        rows, numeric=False))
        elif isinstance(result, SweepResult):
            sec.intro.append(f"{name}: {result.tool} against {result.target}, "
                             f"{result.model} model, options "
                             + ", ".join(f"{k}={v}" for k, v in result.options.to_json().items()
                                         if v not in (None, "", False)) + ".")
        elif isinstance(result, MatrixResult):
            versions = Provenance.from_json(d).environment
            if versions:
                sec.tables.append(Table(f"{name}: versions", ("component", "version"),
                                        list(versions), numeric=False))
        elif kind == "trace":
            t = d.get("targets") or {}
            sec.intro.append(f"{name}: traced on host {d.get('host', '?')} at "
                             f"{d.get('created', '?')} with {d.get('source', '?')}: "
                             f"{t.get('description', '')}.")
            if d.get("settings"):
                table, rest = _settings_table(f"{name}: PHP settings as the workers saw them",
                                              d["settings"])
                sec.tables.append(table)
                if rest:
                    sec.details.append((f"{name}: every recorded setting", rest))
            mounts = d.get("mounts") or []
            if mounts:
                sec.tables.append(Table(f"{name}: mounts", ("mount point", "type"),
                                        [(m[0], m[1]) for m in mounts], numeric=False))
        elif kind == "check":
            for p in d.get("pools") or []:
                sec.intro.append(f"{name}: pool {p.get('pool')}, settings from "
                                 f"{p.get('settings_source', '?')}; PHP {p.get('php_binary') or '?'}; "
                                 f"docroot {p.get('docroot') or '?'} ({p.get('php_files') or 0:,} "
                                 "PHP files).")
                pm = p.get("pm") or {}
                table, rest = _settings_table(f"{name}: pool {p.get('pool')} settings",
                                              {**(p.get("settings") or {}), **pm})
                sec.tables.append(table)
                if rest:
                    sec.details.append((f"{name}: pool {p.get('pool')}, every setting", rest))
                rows = [(m.get("role", ""), m.get("mount_point", ""), m.get("fstype", ""),
                         ", ".join(f"{k}={v}" for k, v in {**(m.get("cache_options") or {}),
                                                          **(m.get("volume_options") or {})}.items()))
                        for m in p.get("mounts") or []]
                if rows:
                    sec.tables.append(Table(f"{name}: mounts holding the pool's files",
                                            ("role", "mount point", "type", "options"), rows,
                                            numeric=False))
        elif kind == "demo":
            mo = ((d.get("settings") or {}).get("network") or {}).get("mount_options") or {}
            sec.intro.append(f"{name}: {d.get('app')} on local disk and {d.get('storage')}"
                             + ("; mount options after the fix: "
                                + ", ".join(f"{k}={v}" for k, v in mo.items()) if mo else "")
                             + ".")
    return sec
