"""whatif's fidelity on PHP 7.4 and 8.4 (tests/php_scenarios.py on a PHP root's binary,
chrooted in its Debian root): each scenario is traced on that version, the trace's header
says the version, the model replays as that version, and its determined predictions match
the calls real PHP of that version makes under strace, call type by call type. The long run
is `bench/whatif_fidelity.py --php 7.4|8.4`."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest

import php_scenarios as ps
from statstorm.results.trace import read_trace

pytestmark = [pytest.mark.root, pytest.mark.slow]

ROOTS = Path(os.environ.get("STATSTORM_PHP_ROOTS") or "/var/tmp/statstorm-php-roots")
# 1 and 11: a symlinked `current` under a realpath cache that fills (the PHP_BINARY search of
# the wrapped command is not cached); 2: 7.4 with open_basedir (stat probes check twice)
SEEDS = {"7.4": (1, 2, 3, 11), "8.4": (1, 3, 11)}


@pytest.fixture(params=sorted(SEEDS))
def php(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
        ) -> Iterator[tuple[str, str, Path]]:
    """(version, root, base): the version's root, with `base` (the scenarios' directory)
    mounted in it for the test; skipped when the root is not built."""
    version = str(request.param)
    try:
        _, root = ps.root_of_version(version, ROOTS)
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    base = Path("/var/tmp") / tmp_path_factory.mktemp(f"fidelity-{version}").name
    base.mkdir(mode=0o755, parents=True, exist_ok=True)
    try:
        with ps.root_mounted(root, base):
            yield version, root, base
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_scenarios_on_the_version(php: tuple[str, str, Path], state_home: Path) -> None:
    """Fixed seeds on the version: the replay gives what the tracer measured, the tracer
    what strace saw, and every prediction whatif names no limit for is exact."""
    version, root, base = php
    bad = []
    for seed in SEEDS[version]:
        sc = ps.generate(seed, base, php=(version, root))
        for c in ps.check_scenario(sc, state_home):
            if not c.exact and (c.determined or c.what in ("replay", "strace vs tracer")):
                bad.append((seed, c.what, c.error()))
    assert not bad, bad


def test_header_and_whatif_name_the_version(php: tuple[str, str, Path],
                                            state_home: Path) -> None:
    """The trace of a root's PHP says its version in the header (major.minor and the full
    version the binary gives), and whatif says it modelled that version, traced."""
    version, root, base = php
    sc = ps.Scenario(seed=0, root=base / "named", files={"a.php": "<?php $a = 1;\n"},
                     lines=["include __DIR__ . '/a.php';"], php_root=root,
                     php_version=version)
    sc.settings = [{"realpath_cache_size": "4096K"}]
    sc.build()
    out = ps.record(sc, state_home, base / "named.sst.gz")
    head = read_trace(out).head
    assert head.php.version == version
    assert head.php.full.startswith(version + ".")
    env = dict(os.environ, STATSTORM_HOME=str(state_home))
    proc = subprocess.run([sys.executable, "-m", "statstorm", "whatif", str(out), "--set",
                           "realpath_cache_size=0", "--json"], capture_output=True, text=True,
                          env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["php"] == {"version": version, "full": head.php.full,
                                              "basis": "traced"}
    proc = subprocess.run([sys.executable, "-m", "statstorm", "whatif", str(out)],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert f"modelled PHP {version} (traced" in proc.stdout
