"""model/app_tree.py: the tree a shadow copies, from the files an app's requests include."""

from __future__ import annotations

from pathlib import Path

import pytest

from statstorm.model.app_tree import tree_of
from statstorm.results.app_tree import AppTree


def test_an_app_within_its_docroot_is_its_docroot() -> None:
    t = tree_of("/srv/wiki/", ["/srv/wiki/index.php", "/srv/wiki/includes/a.php"])
    assert t == AppTree("/srv/wiki", "/srv/wiki") and t.note() == "" and not t.above


def test_code_above_the_docroot_takes_the_directory_holding_both() -> None:
    t = tree_of("/srv/app/public", ["/srv/app/public/index.php", "/srv/app/src/Kernel.php",
                                    "/srv/app/vendor/autoload.php", "/usr/share/php/Foo.php"])
    assert t.root == "/srv/app" and t.above and t.in_place == ("/usr/share/php",)
    assert "/srv/app is copied, the docroot /srv/app/public within it" in t.note()
    assert "code used in place, not copied: /usr/share/php" in t.note()


def test_a_tree_too_near_the_root_is_not_copied_its_code_is_named() -> None:
    t = tree_of("/srv/site/htdocs", ["/srv/site/htdocs/index.php", "/opt/lib/a.php",
                                     "/opt/lib/sub/b.php", "relative.php"])
    assert t.root == "/srv/site/htdocs" and t.in_place == ("/opt/lib",)
    assert tree_of("/var/www", ["/var/www/index.php"]).root == "/var/www"


def test_by_directories_as_checks_trace_facts_give_them() -> None:
    from statstorm.model.app_tree import tree_of_dirs
    t = tree_of_dirs("/srv/app/public", ["/srv/app/public", "/srv/app/src/Http", "/usr/share/php"])
    assert t.root == "/srv/app" and t.in_place == ("/usr/share/php",)


def test_checks_app_root_is_the_wider_of_composers_and_the_traces(tmp_path: Path) -> None:
    """check's app root (the mirror's tree): the Composer project around the docroot, or the
    directory above it holding what the traced requests included."""
    from statstorm.adapters.php.pool_facts import _app_root
    from statstorm.model.checkfacts import TraceFacts
    public = tmp_path / "app/public"
    public.mkdir(parents=True)
    traced = TraceFacts(requests=3, detail="events", per_request={},
                        included_dirs=(str(public), str(tmp_path / "app/src")))
    assert _app_root(str(public), None) == str(public)
    assert _app_root(str(public), traced) == str(tmp_path / "app")
    (tmp_path / "app/composer.json").write_text("{}")
    assert _app_root(str(public), None) == str(tmp_path / "app")
    within = TraceFacts(requests=3, detail="events", per_request={},
                        included_dirs=(str(public),))
    assert _app_root(str(public), within) == str(tmp_path / "app")
    assert _app_root("", traced) == ""


def test_tune_copies_the_docroot_and_says_why_when_the_tree_cannot_be_traced(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from statstorm.adapters.tracing import page_views
    from statstorm.commands import tune
    from statstorm.env import Env
    from statstorm.errors import DependencyError

    def no_tracer(*args: object, **kw: object) -> float:
        raise DependencyError("no tracer works here: statstorm doctor")
    monkeypatch.setattr(page_views, "trace_views", no_tracer)
    t = tune.app_tree(Env(), "www", ("http://127.0.0.1/",), "/srv/app/public")
    assert t.root == t.docroot == "/srv/app/public"
    assert t.note() == ("the app's tree was not traced (no tracer works here: statstorm "
                        "doctor): its docroot is copied")
