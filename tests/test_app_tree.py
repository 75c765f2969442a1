"""model/app_tree.py: the tree a shadow copies, from the files an app's requests include."""

from __future__ import annotations

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
