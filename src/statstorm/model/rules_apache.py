"""`statstorm check` rules about an Apache server in front of PHP: `.htaccess` lookups,
symlink checks, and MaxRequestWorkers against memory. Pure code; see model.rules for the
registry and model.checkfacts / results.facts.ApacheFacts for what they read.

Apache's directory walk (server/request.c, ap_directory_walk) visits every directory from
`/` down to the requested file's: where AllowOverride is not None it opens `.htaccess` there
(a failed open, on network storage a round trip, when there is none), and where Options lack
FollowSymLinks (or have SymLinksIfOwnerMatch) it lstat()s the component to check for a
symlink. Both are once per request per directory (and once more under the script's own
name: `index.php/.htaccess`); `tests/test_apache_check.py` counts them under strace on a
real Apache lab.
"""

from __future__ import annotations

from statstorm.model.checkfacts import Facts
from statstorm.model.finding import Finding, Rule, code_on_network, finding, memory_fit
from statstorm.results.facts import ApacheFacts
from statstorm.results.serving import handler_of

def _overriding(a: ApacheFacts) -> list[tuple[str, str]]:
    return [(d, ov) for d, ov, _ in a.walk if ov.strip().lower() != "none"]


def _symlink_checked(options: str) -> bool:
    """True when Apache lstat()s a component under these Options (no FollowSymLinks, or
    SymLinksIfOwnerMatch). Options are merged by then, `-X`/`+X` resolved."""
    words = {w.lstrip("+").lower() for w in options.split() if not w.startswith("-")}
    if "symlinksifownermatch" in words:
        return True
    return "followsymlinks" not in words and "all" not in words


def _network_note(facts: Facts) -> tuple[str, str]:
    net = code_on_network(facts)
    if net:
        return "warning", f"the docroot is on {net[0].fstype} ({net[0].mount_point}): each is a network round trip"
    return "info", "the docroot is on local disk: each is a cheap cached lookup"


def htaccess_lookups(facts: Facts) -> list[Finding]:
    a = facts.apache
    if a is None or not a.docroot:
        return []
    dirs = _overriding(a)
    if not dirs:
        return []
    severity, where = _network_note(facts)
    # The walk also tries the script's own name as a directory (`index.php/.htaccess`, a
    # failed open with ENOTDIR) where the docroot allows overrides: seen under strace.
    lookups = len(dirs) + (1 if dirs[-1][0] == a.walk[-1][0] else 0)
    ev = [f"AllowOverride {ov} in effect for {d}" for d, ov in dirs[-3:]]
    ev.append(f"a request for a script in {a.docroot} tries {lookups} .htaccess path(s): one "
              f"in each of {len(dirs)} director{'y' if len(dirs) == 1 else 'ies'} and one under "
              f"the script's own name (more for scripts below the docroot); {where}")
    if a.directory_source:
        ev.append(f"set in {a.directory_source}")
    gain = {"metric": "syscalls per request", "syscalls_per_request": -float(lookups)}
    if a.htaccess_files:
        ev.append(f"{len(a.htaccess_files)} .htaccess file(s) hold rules: "
                  + ", ".join(a.htaccess_files[:3]))
        change = [f"# move the rules of {', '.join(a.htaccess_files[:3])} into "
                  f"<Directory {a.docroot}> of {a.config},",
                  "# then set AllowOverride None there (apply leaves both to you)"]
        return [finding(severity, ".htaccess is looked up on every request", ev, change,
                        "the rules in .htaccess stop working until they are moved into the "
                        "server configuration (apply leaves this to you)", gain,
                        "one open() per directory per request (Apache's directory walk)")]
    return [finding(severity, ".htaccess is looked up on every request", ev,
                    [f"# apache <Directory {a.docroot}>:", "AllowOverride None"],
                    "a .htaccess file added later is ignored; rules go into the server "
                    "configuration", gain,
                    "one open() per directory per request (Apache's directory walk)")]


def symlink_checks(facts: Facts) -> list[Finding]:
    a = facts.apache
    if a is None or not a.docroot:
        return []
    checked = [d for d, _, opts in a.walk if _symlink_checked(opts)]
    if not checked:
        return []
    severity, where = _network_note(facts)
    opts = next((o for d, _, o in reversed(a.walk)), "")
    ev = [f"Options {opts or '(none)'} in effect for {a.docroot}",
          f"Apache lstat()s {len(checked)} path component(s) per request to refuse "
          f"symlinks it may not follow; {where}"]
    return [finding(severity, "Apache checks every path component for symlinks", ev,
                    [f"# apache <Directory {a.docroot}>:", "Options FollowSymLinks"],
                    "symlinks under the docroot are followed whoever owns them (keep "
                    "untrusted users' files out of the docroot)",
                    {"metric": "syscalls per request", "syscalls_per_request": -float(len(checked))},
                    "one lstat() per path component per request")]


def max_workers_memory(facts: Facts) -> list[Finding]:
    """mod_php: every Apache child carries PHP; MaxRequestWorkers of them must fit in RAM."""
    a = facts.apache
    handler = handler_of(a.handler) if a is not None else None
    if (a is None or handler is None or not handler.children_carry_php or not a.child_pss_kb
            or facts.mem_available_kb is None):
        return []
    m = memory_fit(a.child_pss_kb, a.max_request_workers, facts.mem_available_kb)
    if m is None:
        return []
    ev = [f"MaxRequestWorkers {a.max_request_workers} ({a.mpm} MPM, mod_php): child PSS p95 "
          f"{m.per_kb / 1024:.1f} MiB over {m.seen} children", m.evidence("children")]
    return [finding(m.severity, "MaxRequestWorkers does not fit in memory", ev,
                    ["# apache server config:", f"MaxRequestWorkers {m.fits}"],
                    "fewer concurrent requests; under a burst connections wait in the listen "
                    "queue instead of the machine swapping", None,
                    "a memory bound, not a speed-up")]


RULES: tuple[tuple[str, Rule], ...] = (
    ("apache-htaccess-lookups", htaccess_lookups),
    ("apache-symlink-checks", symlink_checks),
    ("apache-max-workers-memory", max_workers_memory),
)
