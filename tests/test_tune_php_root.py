"""`statstorm tune` of a lab's pool of PHP 8.4 (php-fpm chrooted in its Debian root) on a
GlusterFS volume: the dry run's shadow runs the pool's own PHP, in the same root, on the copy
mounted there; a probe page asked on the shadow while it is measured says PHP 8.4; the result
names the version; nothing of the shadow is left afterwards."""

from __future__ import annotations

import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Callable

import pytest

from conftest import leftovers
from statstorm.adapters.labs import php_roots
from statstorm.adapters.labs import shadow as shadows
from statstorm.adapters.load import interleaved
from statstorm.commands import tune as tune_cmd
from statstorm.env import Env

pytestmark = [pytest.mark.root, pytest.mark.slow]

PROBE = "statstorm-probe.php"


def probe(base: str) -> str:
    """The PHP version a site's probe page prints."""
    with urllib.request.urlopen(f"{base}/{PROBE}", timeout=20) as answer:
        return answer.read().decode().strip()


def test_dry_run_shadow_runs_the_pools_php_in_its_root(
        state_home: Path, tmp_path: Path, roots: Path, monkeypatch: pytest.MonkeyPatch,
        lab: Callable[..., dict[str, Any]]) -> None:
    monkeypatch.setenv("STATSTORM_HOME", str(state_home))
    st = lab("--app", "synthetic", "--storage", "glusterfs", "--php", "8.4", "--workers", "2")
    assert st["php_version"] == "8.4"
    Path(st["docroot"], PROBE).write_text("<?php echo PHP_VERSION, \"\\n\";\n")
    assert probe(st["url"]).startswith("8.4.")
    pool = f"statstorm-{st['name']}"
    shadow_dir = state_home / "labs" / shadows.lab_name(pool)
    seen: list[str] = []

    def measure(env: Env, local: interleaved.Target, network: interleaved.Target,
                load: interleaved.Load, label: str, say: Callable[[str], None]) -> Any:
        parts = urllib.parse.urlsplit(local.urls[0])
        seen.append(probe(f"{parts.scheme}://{parts.netloc}"))
        assert (shadow_dir / "code").is_dir()
        assert php_roots.mounts_under(roots / "8.4" / str(shadow_dir).lstrip("/")), \
            "the shadow's directory is not mounted in the PHP root"
        return interleaved.measure(env, local, network, load, label, say)

    env = Env(state_root=state_home)
    opts = tune_cmd.TuneOptions(pool=pool, urls=(st["url"] + st["entry_path"],),
                                output_dir=tmp_path / "out", rounds=1, duration_s=1,
                                warmup_s=1, views=2)
    result = tune_cmd.run(env, opts, steps=tune_cmd.Steps(measure=measure))
    assert result.dry_run and result.before is not None
    [served] = seen  # the probe page, asked on the shadow while it was measured
    assert served.startswith("8.4."), served
    assert any("the shadow runs PHP 8.4 (from its PHP root" in n for n in result.notes), result.notes
    # nothing of the shadow left: no directory, process or mount (in the root or not)
    assert leftovers(str(shadow_dir)) == []
    assert not php_roots.mounts_under(roots / "8.4" / str(shadow_dir).lstrip("/"))
    assert not (roots / "8.4" / str(shadow_dir).lstrip("/")).exists()
