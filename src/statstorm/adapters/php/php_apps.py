"""Which PHP app a docroot serves, and the file that configures it.

`check` uses it to say what the app does per request and how its own cache is turned on;
`apply` changes the recognised app's configuration file (MediaWiki's LocalSettings.php).
"""

from __future__ import annotations

from pathlib import Path

# app: (files that identify it, relative to its root; its configuration file)
SIGNATURES: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("mediawiki", ("includes/Defines.php", "includes/WebStart.php"), "LocalSettings.php"),
    ("wordpress", ("wp-includes/version.php", "wp-settings.php"), "wp-config.php"),
    ("drupal", ("core/lib/Drupal.php",), "sites/default/settings.php"),
    ("laravel", ("artisan", "bootstrap/app.php"), ".env"),
    ("symfony", ("bin/console", "config/bundles.php"), "config/packages/cache.yaml"),
)


def recognise(docroot: str) -> tuple[str, str]:
    """(app, configuration file) for the app served from `docroot` (its root or its
    `public/`); ("", "") when none is recognised. The configuration file is '' when the
    app is recognised but the file is missing."""
    if not docroot:
        return "", ""
    root = Path(docroot)
    for base in (root, root.parent):
        for app, marks, conf in SIGNATURES:
            try:
                if all((base / m).is_file() for m in marks):
                    cfg = base / conf
                    return app, str(cfg) if cfg.is_file() else ""
            except OSError:
                continue
    return "", ""
