"""The report's environment section (what each result ran on: settings as the pool saw them,
mounts and their options, tools) and the command that re-makes each result file, rebuilt
from what the file holds. Pure functions of the files' data.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping

from statstorm.model import storage_delay
from statstorm.report.sections import Section, Table
from statstorm.results.apply_report import ApplyReport
from statstorm.results.check import CheckResult
from statstorm.results.demo import DemoResult
from statstorm.results.fsbench import FsbenchResult, mount_facts
from statstorm.results.jsontypes import JsonObject, JsonValue
from statstorm.results.matrix import MatrixResult
from statstorm.results.provenance import Provenance
from statstorm.results.sweep import SweepResult
from statstorm.results.trace import Trace
from statstorm.results.trace.summary import TraceSummary
from statstorm.results.whatif import WhatifResult

# a result read by its class (a trace: its records)
Typed = (SweepResult | FsbenchResult | MatrixResult | WhatifResult | CheckResult | ApplyReport
         | DemoResult | Trace | TraceSummary | None)

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


def trace_command(name: str, trace: Trace) -> str:
    h, trailer = trace.head, trace.tail
    target = (["--lab", _lab_name(str(h.targets.get("description", "")))]
              if h.target_mode == "lab" else ["--pool", h.target_pool] if h.target_pool
              else [x for p in h.target_pids for x in ("-p", str(p))])
    if h.source == "strace-c":
        return _q(["statstorm", "trace", "import", "STRACE-LOG", "-o", name])
    stop = (["--requests", str(trailer.completed_requests)]
            if trailer.stopped == "requests" and trailer.completed_requests else [])
    counts = ["--counts"] if h.detail == "counts" else []
    return _q(["statstorm", "trace", *target, *stop, *counts, "-o", name])


def command(kind: str, name: str, data: JsonObject, result: Typed = None) -> str:
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
    if isinstance(result, Trace):
        return trace_command(name, result)
    if isinstance(result, CheckResult):
        pools = [x for p in result.pools for x in ("--pool", p.pool)]
        return _q(["statstorm", "check", *pools, "--trace", "TRACE", "--json"]) + f" > {name}"
    if isinstance(result, ApplyReport):
        target = ["--lab", result.lab] if result.lab else ["--pool", result.pool or "POOL"]
        ids = sorted({c.finding for c in result.changes})
        verify = ["--verify"] if result.verify else []
        return _q(["statstorm", "apply", *target, *ids, "--yes", *verify, "--json"]) + \
            f" > {name}"
    if isinstance(result, DemoResult):
        rounds = len(result.before.local.rounds if result.before is not None else ()) or 3
        delay = (["--storage-delay", storage_delay.format_us(result.storage_delay_us)]
                 if result.storage_delay_us else [])
        php = ["--php", result.php] if result.php else []
        return _q(["statstorm", "demo", "--app", result.app, "--storage", result.storage,
                   *delay, *php, "--rounds", str(rounds), "-o", result.output_dir or "statstorm-demo"])
    if kind == "trace-summary":
        return _q(["statstorm", "trace", "show", "TRACE", "--json"]) + f" > {name}"
    return ""


def _settings_table(caption: str, settings: Mapping[str, JsonValue]) -> tuple[Table, str]:
    rows = [(k, str(settings[k])) for k in KEY_SETTINGS if k in settings]
    rest = "\n".join(f"{k} = {v}" for k, v in sorted(settings.items()) if k not in KEY_SETTINGS)
    return Table(caption, ("setting", "value"), rows, numeric=False), rest


def environment(files: list[tuple[str, str, JsonObject, Typed]]) -> Section:
    """`files`: (kind, label, data, the data read by its class) of every result file."""
    sec = Section("environment", "Environment")
    for kind, name, d, result in files:
        if isinstance(result, FsbenchResult):
            facts = [mount_facts(m) for m in result.mounts if isinstance(m, dict)]
            benched: list[tuple[str, ...]] = [
                (mp, fstype, source, ", ".join(f"{k}={v}" for k, v in cache.items()))
                for mp, fstype, source, cache in facts]
            header: tuple[str, ...] = ("mount point", "type", "source", "cache options")
            if any(result.storage_delays_us):  # a lab's --storage-delay: how far it stands
                header += ("lab delay per metadata call",)
                benched = [(*row, storage_delay.format_us(result.storage_delay_us(i))
                            if result.storage_delay_us(i) else "none")
                           for i, row in enumerate(benched)]
            if benched:
                sec.tables.append(Table(f"{name}: mounts benchmarked", header, benched,
                                        numeric=False))
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
        elif isinstance(result, Trace):
            h = result.head
            sec.intro.append(f"{name}: traced on host {h.host or '?'} at {h.created or '?'} with "
                             f"{h.source or '?'}: {h.targets.get('description', '')}.")
            if h.settings:
                table, rest = _settings_table(f"{name}: PHP settings as the workers saw them",
                                              h.settings)
                sec.tables.append(table)
                if rest:
                    sec.details.append((f"{name}: every recorded setting", rest))
            if h.mounts:
                sec.tables.append(Table(f"{name}: mounts", ("mount point", "type"),
                                        list(h.mounts), numeric=False))
        elif isinstance(result, CheckResult):
            for p in result.pools:
                sec.intro.append(f"{name}: pool {p.pool}, settings from "
                                 f"{p.settings_source}; PHP {p.php_binary or '?'}; "
                                 f"docroot {p.docroot or '?'} ({p.php_files or 0:,} PHP files).")
                table, rest = _settings_table(f"{name}: pool {p.pool} settings",
                                              {**p.settings, **p.pm})
                sec.tables.append(table)
                if rest:
                    sec.details.append((f"{name}: pool {p.pool}, every setting", rest))
                rows = [(m.role, m.mount_point, m.fstype, ", ".join(
                    f"{k}={v}" for k, v in {**m.cache_options, **m.volume_options}.items()))
                        for m in p.mounts]
                if rows:
                    sec.tables.append(Table(f"{name}: mounts holding the pool's files",
                                            ("role", "mount point", "type", "options"), rows,
                                            numeric=False))
        elif isinstance(result, DemoResult):
            net = result.settings["network"] if "network" in result.settings else None
            mo = (net.mount_options if net is not None else None) or {}
            sec.intro.append(f"{name}: {result.app}"
                             + (f" (PHP {result.php})" if result.php else "")
                             + f" on local disk and {result.storage}"
                             + (f" with {storage_delay.format_us(result.storage_delay_us)} "
                                "added to each round trip to the storage (--storage-delay)"
                                if result.storage_delay_us else "")
                             + ("; mount options after the fix: "
                                + ", ".join(f"{k}={v}" for k, v in mo.items()) if mo else "")
                             + ".")
    return sec
