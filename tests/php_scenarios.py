"""Randomised PHP scenarios for whatif's differential testing against real PHP.

A seed gives one scenario: a random code tree (depth, fan-out, name lengths, a symlinked
release), an include_path with missing and empty entries, and a CLI script that includes
files in every style PHP knows (absolute, `__DIR__`, relative through include_path with the
script's directory as the fallback, `./` and `../` against a cwd that `chdir` moves), plain
and `*_once`, probes with the stat family, an autoloader, `clearstatcache`, and files
created, renamed and removed while it runs; blocks repeat so that the realpath cache and
OPcache are used again. The seed also picks settings: one to record the trace under and
others to predict (realpath_cache_size from 0 through sizes that fill mid-run to 4096K,
open_basedir, OPcache on/off with revalidate_freq, revalidate_path, validate_timestamps and
enable_file_override, include_path orders).

`check_case` records the scenario once with `statstorm trace --cmd` (eBPF), replays it under
its own settings (must give what the tracer measured), runs real PHP under strace for every
setting, and compares the model's prediction with it call type by call type. Used by
tests/test_whatif_fidelity.py (a fixed set of seeds) and bench/whatif_fidelity.py (hundreds).

A scenario runs on the host's PHP (Debian 12's 8.2) or on a PHP root's (`php_root`: 7.4 or
8.4, adapters/labs/php_roots.py): the root's binary runs chrooted in it, the scenarios'
directory mounted in the root at the same path (`root_mounted`), traced by tests/root_trace.py,
and the model replays it as that version (the trace's header says which).

Not varied: realpath_cache_ttl (it needs the run to outlast the ttl: real waiting, covered by
tests/test_whatif_real.py) and pm.max_requests (php-fpm only).
"""

from __future__ import annotations

import os
import random
import shlex
import shutil
import subprocess
import sys
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from root_trace import chrooted

from statstorm.adapters.tracing.strace_log import import_file
from statstorm.adapters.tracing.strace_session import SYSCALLS
from statstorm.model.phpsettings import from_recorded, parse_set, with_changes
from statstorm.model.replay import prepare, replay
from statstorm.model.replay_limits import limits
from statstorm.model.tracestats import summarize
from statstorm.results.trace import SUMMARY_KEYS, read_trace

OLD = 1_600_000_000  # far older than OPcache's file_update_protection
NAME_CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-"
CACHE_SIZES = ("0", "1K", "2K", "3K", "4K", "6K", "8K", "16K", "4096K")
KEYS = ("realpath_cache_size", "open_basedir", "include_path", "opcache.enable_cli",
        "opcache.revalidate_freq", "opcache.revalidate_path", "opcache.validate_timestamps",
        "opcache.enable_file_override")


@dataclass
class Scenario:
    seed: int
    root: Path
    files: dict[str, str] = field(default_factory=dict)  # relative path → content
    links: dict[str, str] = field(default_factory=dict)  # relative path → link target
    script: str = "main.php"  # relative to root
    lines: list[str] = field(default_factory=list)  # the script's body
    ip_entries: list[str] = field(default_factory=list)
    relative_primary: bool = False
    settings: list[dict[str, str]] = field(default_factory=list)  # [0]: recorded
    php_root: str = ""  # a PHP root's directory ('' the host's PHP)
    php_version: str = ""  # its version ("8.4"; '' the host's)

    def build(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)
        self.root.mkdir(parents=True)
        os.chmod(self.root, 0o755)
        for rel, text in self.files.items():
            p = self.root / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(text)
        for rel, target in self.links.items():
            p = self.root / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.symlink_to(target)
        (self.root / self.script).parent.mkdir(parents=True, exist_ok=True)
        (self.root / self.script).write_text("<?php\n" + "\n".join(self.lines) + "\n")
        for dirpath, dirnames, filenames in os.walk(self.root):
            for n in filenames + dirnames:
                os.utime(Path(dirpath, n), (OLD, OLD), follow_symlinks=False)

    def php_args(self, settings: dict[str, str]) -> list[str]:
        """PHP's options and script under `settings` (after the binary)."""
        argv = ["-n", "-d", "zend_extension=opcache"]
        for k, v in settings.items():
            argv += ["-d", f"{k}={v}"]
        return argv + [self.script if self.relative_primary else str(self.root / self.script)]

    def php_argv(self, settings: dict[str, str]) -> list[str]:
        """The command running the scenario under `settings`, from its root directory: the
        host's `php`, or the root's binary chrooted in its root (in the same directory)."""
        if self.php_root:
            return chrooted(self.php_root, self.binary, self.php_args(settings), str(self.root))
        return ["php", *self.php_args(settings)]

    @property
    def binary(self) -> str:
        """The PHP binary as the scenario's PHP sees it."""
        return f"/usr/bin/php{self.php_version}" if self.php_root else "php"

    def changes(self, settings: dict[str, str]) -> list[str]:
        """`--set` items taking the recorded settings to `settings`."""
        rec = self.settings[0]
        return [f"{k}={v}" for k, v in settings.items() if rec.get(k) != v]


FEATURES = frozenset(("include", "probe", "chdir", "clear", "autoload", "tmpfile", "symlink",
                      "opcache", "basedir", "cache", "ip_order"))


class _Gen:
    def __init__(self, seed: int, base: Path, features: frozenset[str] = FEATURES) -> None:
        self.features = features
        self.rnd = random.Random(seed)
        self.sc = Scenario(seed, base / f"case-{seed}")
        self.dirs: list[str] = [""]  # relative directories that exist
        self.php: list[str] = []  # relative PHP files that exist (and define nothing)
        self.classes: list[str] = []
        self.tmp = 0

    def name(self, lo: int = 1, hi: int = 24) -> str:
        n = self.rnd.randint(lo, hi)
        return "".join(self.rnd.choice(NAME_CHARS) for _ in range(n)).lstrip("-") or "d"

    def tree(self) -> None:
        rnd = self.rnd
        for _ in range(rnd.randint(2, 6)):
            parent = rnd.choice(self.dirs)
            if parent.count("/") >= 5:
                continue
            d = (parent + "/" if parent else "") + self.name()
            if d not in self.dirs:
                self.dirs.append(d)
        for i in range(rnd.randint(4, 30)):
            d = rnd.choice(self.dirs)
            f = (d + "/" if d else "") + f"{self.name(1, 30)}{i}.php"
            self.sc.files[f] = f"<?php $GLOBALS['n'] = ($GLOBALS['n'] ?? 0) + {i};\n"
            self.php.append(f)
        if "symlink" in self.features and rnd.random() < 0.4:  # current -> releases/rN
            rel = f"releases/r{rnd.randint(1, 9)}"
            for i in range(rnd.randint(2, 8)):
                f = f"{rel}/lib/{self.name()}{i}.php"
                self.sc.files[f] = "<?php $r = 1;\n"
                self.php.append("current/" + f.split("/", 2)[2])
            self.sc.links["current"] = rel
            self.dirs += [rel, rel + "/lib", "current", "current/lib"]
        if "autoload" in self.features and rnd.random() < 0.5:  # an autoloaded namespace
            for i in range(rnd.randint(1, 6)):
                self.sc.files[f"classes/Acme/C{i}.php"] = \
                    f"<?php namespace Acme; class C{i} {{}}\n"
                self.classes.append(f"Acme\\C{i}")
        if rnd.random() < 0.3:
            self.sc.script = "public/main.php"
            self.dirs.append("public")

    def include_path(self) -> None:
        rnd = self.rnd
        entries = [str(self.sc.root / d) if d else str(self.sc.root)
                   for d in rnd.sample(self.dirs, min(len(self.dirs), rnd.randint(1, 3)))]
        for _ in range(rnd.randint(0, 3)):  # missing entries, inside and outside the tree
            entries.append(rnd.choice([str(self.sc.root / ("miss-" + self.name(1, 8))),
                                       "/nonexistent-" + self.name(1, 6)]))
        if rnd.random() < 0.3:
            entries.append(".")
        if rnd.random() < 0.15:
            entries.append("")
        rnd.shuffle(entries)
        self.sc.ip_entries = entries

    def path_of(self, rel: str) -> str:
        return str(self.sc.root / rel)

    def target(self) -> tuple[str, bool]:
        """A PHP file (relative to root) and whether it exists."""
        if self.php and self.rnd.random() < 0.8:
            return self.rnd.choice(self.php), True
        d = self.rnd.choice(self.dirs)
        return (d + "/" if d else "") + "missing-" + self.name(1, 10) + ".php", False

    def include(self) -> str:
        rnd = self.rnd
        rel, exists = self.target()
        kind = rnd.choice(("include", "include_once", "require_once", "require"))
        if not exists:
            kind = kind.replace("require", "include")
        style = rnd.choice(("abs", "dir", "ip", "ip", "dot", "dotdot"))
        script_dir = str(Path(self.sc.script).parent).replace(".", "") if "/" in \
            self.sc.script else ""
        if style == "abs":
            arg = repr(self.path_of(rel))
        elif style == "dir":
            up = "/.." if script_dir else ""
            arg = f"__DIR__ . {repr(up + '/' + rel)}"
        elif style == "ip":  # relative to an include_path entry (or nowhere)
            bases = [e for e in self.sc.ip_entries if e.startswith(str(self.sc.root) + "/")
                     or e == str(self.sc.root)]
            name = rel
            if bases and rnd.random() < 0.7:
                base = rnd.choice(bases)[len(str(self.sc.root)):].lstrip("/")
                if base and rel.startswith(base + "/"):
                    name = rel[len(base) + 1:]
            if name.startswith(("/", ".")):
                name = "x/" + name
            arg = repr(name)
            kind = kind.replace("require", "include")
        else:  # against the cwd, which chdir moves
            prefix = "./" if style == "dot" else "../" + rnd.choice(self.dirs).split("/")[-1] + "/"
            arg = repr(prefix + rel)
            kind = kind.replace("require", "include")
        return f"@{kind} {arg};" if kind.startswith("include") else f"{kind} {arg};"

    def probe(self) -> str:
        rnd = self.rnd
        func = rnd.choice(("file_exists", "is_file", "is_dir", "is_readable", "is_link",
                           "filemtime", "is_writable"))
        if rnd.random() < 0.5:
            rel, _ = self.target()
        else:
            rel = rnd.choice(self.dirs) or "."
        arg = repr(self.path_of(rel)) if rnd.random() < 0.7 else repr(rel or ".")
        return f"@{func}({arg});"

    def statement(self) -> str:
        rnd = self.rnd
        while True:
            r = rnd.random()
            if r < 0.45 and "include" in self.features:
                return self.include()
            if 0.45 <= r < 0.7 and "probe" in self.features:
                return self.probe()
            if 0.7 <= r < 0.78 and "chdir" in self.features:
                return f"chdir({repr(self.path_of(rnd.choice(self.dirs)))});"
            if 0.78 <= r < 0.84 and "clear" in self.features:
                return rnd.choice(("clearstatcache();", "clearstatcache(true);",
                                   "clearstatcache(true, "
                                   f"{repr(self.path_of(self.target()[0]))});"))
            if 0.84 <= r < 0.92 and self.classes:
                cls = rnd.choice(self.classes + ["Acme\\Nope"])
                return f"class_exists({cls!r});"
            if r >= 0.92 and "tmpfile" in self.features:
                return self.tmpfile()

    def tmpfile(self) -> str:
        rnd = self.rnd
        self.tmp += 1
        d = rnd.choice(self.dirs)
        a = self.path_of((d + "/" if d else "") + f"tmp{self.tmp}.php")
        b = self.path_of((d + "/" if d else "") + f"moved{self.tmp}.php")
        if rnd.random() < 0.5:
            return (f"file_put_contents({a!r}, '<?php $t = 1;'); include {a!r}; "
                    f"@file_exists({a!r}); unlink({a!r}); @file_exists({a!r});")
        return (f"file_put_contents({a!r}, '<?php $t = 2;'); rename({a!r}, {b!r}); "
                f"@include {b!r}; @is_file({a!r}); unlink({b!r});")

    def script(self) -> None:
        rnd = self.rnd
        lines = self.sc.lines
        if self.classes:
            classes = str(self.sc.root) + "/classes/"
            lines.append("spl_autoload_register(function ($c) { $f = "
                         f"{classes!r} . str_replace(chr(92), '/', $c) "
                         ". '.php'; if (is_file($f)) { require $f; } });")
        if rnd.random() < 0.2:  # the script sets its own include_path
            lines.append(f"set_include_path({':'.join(self.sc.ip_entries)!r});")
        for _ in range(rnd.randint(2, 5)):
            block = [self.statement() for _ in range(rnd.randint(2, 12))]
            reps = rnd.choice((1, 1, 2, 3, 5))
            if reps == 1:
                lines += block
            else:
                lines.append(f"for ($p = 0; $p < {reps}; $p++) {{")
                lines += ["  " + s for s in block]
                lines.append("}")

    def settings(self) -> None:
        rnd = self.rnd
        root = str(self.sc.root)

        f = self.features

        def one() -> dict[str, str]:
            return {"realpath_cache_size": rnd.choice(CACHE_SIZES) if "cache" in f else "4096K",
                    "open_basedir": rnd.choice(("", "", root, f"/nonexistent-first:{root}"))
                    if "basedir" in f else "",
                    "include_path": ":".join(rnd.sample(self.sc.ip_entries,
                                                        len(self.sc.ip_entries)))
                    if "ip_order" in f else ":".join(self.sc.ip_entries),
                    "opcache.enable_cli": rnd.choice(("0", "1")) if "opcache" in f else "0",
                    "opcache.revalidate_freq": rnd.choice(("0", "2")),
                    "opcache.revalidate_path": rnd.choice(("0", "0", "1")),
                    "opcache.validate_timestamps": rnd.choice(("1", "1", "0")),
                    "opcache.enable_file_override": rnd.choice(("0", "0", "1"))}

        first = one()
        self.sc.settings = [first]
        for _ in range(rnd.randint(2, 4)):
            s = dict(first)
            new = one()
            for k in rnd.sample(KEYS, rnd.randint(1, 3)):
                s[k] = new[k]
            self.sc.settings.append(s)


def generate(seed: int, base: Path, features: frozenset[str] = FEATURES,
             php: tuple[str, str] = ("", "")) -> Scenario:
    """Scenario `seed` under `base`; `php`: (version, root) of a PHP root to run it on."""
    g = _Gen(seed, base, features)
    g.sc.php_version, g.sc.php_root = php
    g.tree()
    g.include_path()
    g.script()
    g.settings()
    g.sc.relative_primary = g.rnd.random() < 0.15
    return g.sc


# -- running ------------------------------------------------------------------------------------
@contextmanager
def root_mounted(root: str, base: Path) -> Iterator[None]:
    """`base` (the scenarios' directory) bind-mounted in the PHP root at the same path, for
    as long as the block runs (unmounted, and the directories made for it removed, whatever
    happens)."""
    target = Path(root + str(base))
    made = [d for d in (target, *target.parents) if not d.exists()]
    target.mkdir(parents=True, exist_ok=True)
    try:
        subprocess.run(["mount", "--bind", str(base), str(target)], check=True, timeout=30)
        try:
            yield
        finally:
            if subprocess.run(["umount", str(target)], timeout=30).returncode != 0:
                subprocess.run(["umount", "-l", str(target)], timeout=30)
    finally:
        for d in made:  # deepest first; never through a mount still there
            try:
                d.rmdir()
            except OSError:
                break


def root_of_version(version: str, roots: Path) -> tuple[str, str]:
    """(version, root directory) for `--php VERSION` ('' and the host's: ('', ''))."""
    if not version or version == "8.2":
        return "", ""
    root = roots / version
    if not (root / "usr" / "bin" / f"php{version}").is_file():
        raise FileNotFoundError(f"no PHP {version} root at {root}: build it with "
                                f"`statstorm lab php-root build {version}`")
    return version, str(root)


def record(sc: Scenario, home: Path, out: Path) -> Path:
    """Trace the scenario under its recorded settings with `statstorm trace --cmd` (a PHP
    root's with tests/root_trace.py)."""
    env = dict(os.environ, STATSTORM_HOME=str(home))
    if sc.php_root:
        argv = [sys.executable, str(Path(__file__).with_name("root_trace.py")), str(out),
                sc.php_root, sc.binary, *sc.php_args(sc.settings[0])]
    else:
        cmd = " ".join(shlex.quote(a) for a in sc.php_argv(sc.settings[0]))
        argv = [sys.executable, "-m", "statstorm", "trace", "--cmd", cmd, "-o", str(out),
                "--json"]
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=sc.root,
                          timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(f"seed {sc.seed}: trace failed: {proc.stderr.strip()[-400:]}")
    return out


def real(sc: Scenario, settings: dict[str, str], log: Path) -> dict[str, float]:
    """Real PHP under strace: its calls per type (the whole run is one request)."""
    argv = ["strace", "-f", "-tt", "-T", "-qq", "-e", f"trace={SYSCALLS}", "-o", str(log),
            "--", *sc.php_argv(settings)]
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=sc.root, timeout=120)
    if proc.returncode != 0:
        raise RuntimeError(f"seed {sc.seed}: php failed under {settings}: "
                           f"{proc.stderr.strip()[-400:]}")
    sc.build()  # the script renames and removes files: the next run starts from the same tree
    per = summarize(import_file(log, requests=1))["per_request"]
    return {k: per[k] for k in SUMMARY_KEYS}


def predict(trace: Any, sc: Scenario, settings: dict[str, str]) -> tuple[dict[str, float],
                                                                         list[str]]:
    """The model's per-request counts under `settings`, and the ids of the limits
    (model.replay_limits) that leave the prediction not determined by the trace."""
    recorded = trace.header["settings"]
    rec = from_recorded(recorded, trace.head.php.version)
    s = with_changes(rec, recorded, parse_set(sc.changes(settings)))
    prep = prepare(trace)
    res = replay(prep, s)
    per = res.per_request
    return {k: per[k] for k in SUMMARY_KEYS}, [lim["id"] for lim in
                                               limits(prep, rec, s, res.guessed)]


@dataclass
class Comparison:
    seed: int
    what: str  # "replay" or the --set changes
    model: dict[str, float]
    real: dict[str, float]
    limits: list[str] = field(default_factory=list)  # not determined by the trace: why

    @property
    def determined(self) -> bool:
        return not self.limits

    @property
    def exact(self) -> bool:
        return self.model == self.real

    def error(self) -> dict[str, float]:
        return {k: self.model[k] - self.real[k] for k in SUMMARY_KEYS
                if self.model[k] != self.real[k]}


def check_case(seed: int, base: Path, home: Path,
               features: frozenset[str] = FEATURES) -> list[Comparison]:
    """Generate scenario `seed` and check it (check_scenario)."""
    return check_scenario(generate(seed, base, features), home)


def check_scenario(sc: Scenario, home: Path) -> list[Comparison]:
    """Record `sc` under its first settings, then compare: the tracer with strace under the
    recorded settings, the model's replay with the tracer, and the model's prediction with
    real PHP under every other setting. The scenario's tree is removed afterwards."""
    sc.build()
    stem = f"case-{sc.seed}"
    try:
        tfile = record(sc, home, sc.root.parent / f"{stem}.sst.gz")
        sc.build()
        trace = read_trace(tfile)
        per = summarize(trace)["per_request"]
        traced = {k: per[k] for k in SUMMARY_KEYS}
        model, lims = predict(trace, sc, sc.settings[0])
        out = [Comparison(sc.seed, "replay", model, traced, lims)]
        log = sc.root.parent / f"{stem}.strace"
        out.append(Comparison(sc.seed, "strace vs tracer", real(sc, sc.settings[0], log),
                              traced))
        for s in sc.settings[1:]:
            model, lims = predict(trace, sc, s)
            out.append(Comparison(sc.seed, " ".join(sc.changes(s)) or "(same)", model,
                                  real(sc, s, log), lims))
        return out
    finally:
        shutil.rmtree(sc.root, ignore_errors=True)
        for leftover in sc.root.parent.glob(f"{stem}.*"):
            leftover.unlink(missing_ok=True)
