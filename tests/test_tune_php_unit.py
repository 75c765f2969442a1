"""tune's shadow and its PHP: which binary the shadow runs (the pool's own by default, another
version's with --php) and the note saying so; --php's errors in one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from statstorm.adapters.labs import shadow as shadows
from statstorm.commands import tune as tune_cmd
from statstorm.env import Env
from statstorm.errors import UsageError
from statstorm.results.php_root import MARKER


def test_the_pools_own_php_by_default() -> None:
    env = Env(state_root=Path("/nonexistent"))
    assert tune_cmd.shadow_binary(env, "/usr/sbin/php-fpm8.2", "") == "/usr/sbin/php-fpm8.2"
    assert tune_cmd.shadow_binary(env, "/usr/sbin/php-fpm8.2", "8.2") == "/usr/sbin/php-fpm8.2"
    assert shadows.php_of("/usr/sbin/php-fpm8.2") == ("8.2", "")
    assert shadows.php_note("/usr/sbin/php-fpm8.2") == (
        "the shadow runs PHP 8.2 (the host's, /usr/sbin/php-fpm8.2), as the pool does")


def test_a_binary_in_a_root_names_its_root(tmp_path: Path) -> None:
    root = tmp_path / "8.4"
    (root / "usr/sbin").mkdir(parents=True)
    (root / MARKER).write_text("{}")
    binary = str(root / "usr/sbin/php-fpm8.4")
    assert shadows.php_of(binary) == ("8.4", str(root))
    assert f"PHP 8.4 (from its PHP root {root}" in shadows.php_note(binary)


def test_another_version_needs_its_root_built(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STATSTORM_PHP_ROOTS", str(tmp_path / "roots"))
    env = Env(state_root=tmp_path)
    with pytest.raises(UsageError, match="statstorm lab php-root build 8.4"):
        tune_cmd.shadow_binary(env, "/usr/sbin/php-fpm8.2", "8.4")
    with pytest.raises(UsageError, match="--php '9.1'"):
        tune_cmd.validate_options(tune_cmd.TuneOptions(
            pool="www", urls=("http://127.0.0.1/",), php="9.1", output_dir=tmp_path / "o"))
