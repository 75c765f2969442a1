"""The object caches of the apps statstorm recognises beside MediaWiki, turned on in the app's
own configuration file with APCu: Drupal's settings.php (`$settings['cache']['default']`),
Laravel's .env (CACHE_STORE, CACHE_DRIVER before Laravel 11), Symfony's cache.yaml
(`framework.cache.app`). Golden files written from the apps' documented defaults
(tests/fixtures/app_config/: Drupal's default.settings.php shape, Laravel 10's and 11's
.env.example, Symfony's recipe cache.yaml and one an admin changed); WordPress keeps its advice
(a drop-in plugin file, not a setting). Pure, no root."""

from __future__ import annotations

from pathlib import Path

import pytest

from test_app_cache import SO, facts, found

from statstorm.adapters.php import php_apps
from statstorm.model.applyplan import APP, POOL_INI, classify, edit_app
from statstorm.model.rules_app import APP_SETTING

FIXTURES = Path(__file__).parent / "fixtures" / "app_config"
CONFIG = {"drupal": "/srv/d/web/sites/default/settings.php", "laravel": "/srv/l/.env",
          "symfony": "/srv/s/config/packages/cache.yaml"}


@pytest.mark.parametrize("app, keys", [
    ("drupal", ["$settings['cache']['default']"]),
    ("laravel", ["CACHE_STORE", "CACHE_DRIVER"]),
    ("symfony", ["framework.cache.app"]),
])
def test_each_app_gets_apcu_and_its_own_cache_setting(app: str, keys: list[str]) -> None:
    f = found(facts(app=app, app_config=CONFIG[app]))["app-data-on-network"]
    changes = classify(f, {})  # type: ignore[arg-type]
    assert [(c.kind, c.key) for c in changes] == [(POOL_INI, "extension")] + [
        (APP, k) for k in keys]
    assert changes[0].value == SO and {c.where for c in changes[1:]} == {CONFIG[app]}
    loaded = found(facts(app=app, app_config=CONFIG[app], extensions=("apcu",)))
    assert [c.key for c in classify(loaded["app-data-on-network"], {})] == keys  # type: ignore[arg-type]


def test_no_apcu_anywhere_is_a_manual_step_and_the_deploy_step_is_said() -> None:
    f = found(facts(app="drupal", app_config=CONFIG["drupal"], apcu_path=""))
    assert [c.kind for c in classify(f["app-data-on-network"], {})] == ["manual"]  # type: ignore[arg-type]
    sf = found(facts(app="symfony", app_config=CONFIG["symfony"]))["app-data-on-network"]
    assert "bin/console cache:clear" in sf.tradeoff  # type: ignore[attr-defined]
    lv = found(facts(app="laravel", app_config=CONFIG["laravel"]))["app-data-on-network"]
    assert "config:cache" in lv.tradeoff  # type: ignore[attr-defined]


def test_wordpress_keeps_the_drop_in_advice() -> None:
    assert "wordpress" not in APP_SETTING
    wp = found(facts(app="wordpress", app_config="/srv/w/wp-config.php"))["app-data-on-network"]
    assert all(c.kind == "manual" for c in classify(wp, {}))  # type: ignore[arg-type]


@pytest.mark.parametrize("app, name", [
    ("drupal", "drupal-settings.php"), ("laravel", "laravel11.env"), ("laravel", "laravel10.env"),
    ("symfony", "symfony-cache.yaml"), ("symfony", "symfony-cache-filesystem.yaml")])
def test_golden_edits_of_the_apps_configuration(app: str, name: str) -> None:
    f = found(facts(app=app, app_config=CONFIG[app], extensions=("apcu",)))
    changes = classify(f["app-data-on-network"], {})  # type: ignore[arg-type]
    stem, _, ext = name.rpartition(".")
    before = (FIXTURES / name).read_text()
    after = edit_app(before, changes)
    assert after == (FIXTURES / f"{stem}.expected.{ext}").read_text()
    assert edit_app(after, changes) == after  # applied twice: the same file
    removed = [ln for ln in before.splitlines() if ln not in after.splitlines()]
    assert len(removed) <= 1  # at most the one line that set the cache before


def test_crlf_and_a_missing_final_newline_are_kept() -> None:
    f = found(facts(app="laravel", app_config=CONFIG["laravel"], extensions=("apcu",)))
    changes = classify(f["app-data-on-network"], {})  # type: ignore[arg-type]
    out = edit_app("APP_NAME=x\r\nCACHE_DRIVER=file", changes)
    assert out == "APP_NAME=x\r\nCACHE_DRIVER=apc\r\n# statstorm apply\r\nCACHE_STORE=apc"


def test_yaml_it_cannot_place_is_refused_in_words() -> None:
    f = found(facts(app="symfony", app_config=CONFIG["symfony"], extensions=("apcu",)))
    changes = classify(f["app-data-on-network"], {})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="framework.cache holds"):
        edit_app("framework:\n    cache: { app: cache.adapter.filesystem }\n", changes)
    assert edit_app("", changes) == "framework:\n    cache:\n        app: cache.adapter.apcu " \
                                    "# statstorm apply\n"


def _touch(root: Path, *names: str) -> None:
    for n in names:
        (root / n).parent.mkdir(parents=True, exist_ok=True)
        (root / n).write_text("x\n")


def test_each_app_recognised_by_its_files_from_its_public_dir(tmp_path: Path) -> None:
    d, lv, sf = tmp_path / "d/web", tmp_path / "l", tmp_path / "s"
    _touch(d, "core/lib/Drupal.php", "sites/default/settings.php", "index.php")
    _touch(lv, "artisan", "bootstrap/app.php", ".env", "public/index.php")
    _touch(sf, "bin/console", "config/bundles.php", "config/packages/cache.yaml",
           "public/index.php")
    assert php_apps.recognise(str(d)) == ("drupal", str(d / "sites/default/settings.php"))
    assert php_apps.recognise(str(lv / "public")) == ("laravel", str(lv / ".env"))
    assert php_apps.recognise(str(sf / "public")) == (
        "symfony", str(sf / "config/packages/cache.yaml"))
