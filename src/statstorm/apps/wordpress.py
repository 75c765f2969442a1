"""WordPress from the Debian package, installed unattended for the lab with MariaDB.

The code tree is the package's `/usr/share/wordpress` copied with symlinks resolved (Debian
links its bundled libraries to `/usr/share/php` and its `wp-config.php` reads
`/etc/wordpress`, so the copy gets the lab's own `wp-config.php` instead) with the theme
from the `wordpress-theme-twentytwentyone` package. The database (the lab's own `mariadbd`,
see `adapters/labs/mariadb.py`) and the uploads stay on local disk in the lab's data directory,
so only the code moves when the storage changes. There is no wp-cli in Debian: WordPress's
own `wp_install()` runs from PHP CLI. The tree's copy and the database are made by
adapters/labs/lab_apps.py (apps/ imports no adapter).
"""

from __future__ import annotations

import re
import secrets
import shutil
from dataclasses import dataclass
from pathlib import Path

from statstorm.env import Env
from statstorm.errors import ComponentError, DependencyError
from statstorm.results.php_root import HOST_VERSION

SOURCE = Path("/usr/share/wordpress")
THEME = "twentytwentyone"  # a classic PHP theme: templates, template parts and includes
THEME_PACKAGE = f"wordpress-theme-{THEME}"
PACKAGES = ("wordpress", THEME_PACKAGE)  # the Debian packages its tree comes from (its cache key)
# Debian's wp-config.php (reads /etc/wordpress) and its .htaccess (a link into /etc/wordpress
# holding only comments); the lab writes its own wp-config.php.
EXCLUDES = ("./wp-config.php", "./.htaccess")
DB_NAME = "wordpress"
DB_USER = "wordpress"
SITE_TITLE = "LabPress"
ADMIN_USER = "admin"
ADMIN_FILE = "wordpress-admin.txt"  # in the lab's conf/ directory, mode 0600
ENTRY = "/"
API = "/index.php?rest_route=/"
PAGE_MARKERS = (f"<title>{SITE_TITLE}", "/wp-content/themes/", "/wp-includes/", "Hello world!")
API_MARKERS = (f'"name":"{SITE_TITLE}"', '"namespaces"')


@dataclass(frozen=True)
class Database:
    """The app's database on the lab's MariaDB: where to reach it and with what password."""

    socket: Path
    password: str


def require_installed(php_version: str = HOST_VERSION, root: str = "") -> None:
    """WordPress, its theme and PHP's mysqli are installed (`root`: the PHP root of another
    `php_version` a lab runs, whose own /usr/lib/php holds its mysqli)."""
    if not (SOURCE / "wp-settings.php").exists():
        raise DependencyError("the wordpress package is not installed: run scripts/setup.sh --lab as root")
    if not (SOURCE / "wp-content/themes" / THEME / "style.css").exists():
        raise DependencyError(f"the {THEME_PACKAGE} package is not installed (WordPress needs a "
                              "theme to render pages): run scripts/setup.sh --lab as root")
    if not list(Path(root + "/usr/lib/php").glob("*/mysqli.so")):
        how = (f"rebuild the PHP root: `statstorm lab php-root build {php_version} --rebuild`"
               if root else "run scripts/setup.sh --lab as root")
        raise DependencyError(f"PHP's mysqli extension is missing (package php{php_version}-"
                              f"mysql): {how}")


def version() -> str:
    text = (SOURCE / "wp-includes/version.php").read_text(errors="replace")
    found = re.search(r"^\$wp_version\s*=\s*'([^']+)'", text, re.M)
    return found.group(1) if found else "unknown"


def install(env: Env, php: str, code: Path, data: Path, conf: Path, port: int,
            db: Database) -> None:
    """Write the lab's wp-config.php into `code`, point its uploads at `data`, and run
    WordPress's installer; the admin's password is written to `conf` only."""
    uploads = data / "wordpress/uploads"
    uploads.mkdir(parents=True, exist_ok=True)
    for path in (uploads.parent, uploads):
        shutil.chown(path, "www-data", "www-data")
    link = code / "wp-content/uploads"  # not in the package; WordPress makes it on upload
    if link.is_dir() and not link.is_symlink():
        shutil.rmtree(link)
    link.unlink(missing_ok=True)
    link.symlink_to(uploads)
    config = code / "wp-config.php"
    config.write_text(render_config(db, port))
    shutil.chown(config, "root", "www-data")
    config.chmod(0o640)  # it holds the database password
    script = conf / "wordpress-install.php"
    script.write_text(INSTALLER)
    admin_password = secrets.token_urlsafe(18)
    secret = conf / ADMIN_FILE
    secret.touch(mode=0o600)
    secret.chmod(0o600)  # whatever the umask
    secret.write_text(f"user {ADMIN_USER}\npassword {admin_password}\n")
    res = env.run([php, str(script), SITE_TITLE, ADMIN_USER, "admin@statstorm.invalid"],
                  cwd=code, input_text=admin_password + "\n", timeout=300, check=False,
                  what="WordPress wp_install()")
    if res.returncode != 0 or "statstorm: installed" not in res.stdout:
        raise ComponentError(f"WordPress's installer failed: {res.first_error_line()}")


def render_config(db: Database, port: int) -> str:
    """The lab's wp-config.php: MariaDB over the socket, home URL following the port the
    request came in on (as MediaWiki's $wgServer in the lab), no cron, no outside HTTP."""
    keys = "".join(f"define('{k}', '{secrets.token_hex(32)}');\n" for k in (
        "AUTH_KEY", "SECURE_AUTH_KEY", "LOGGED_IN_KEY", "NONCE_KEY",
        "AUTH_SALT", "SECURE_AUTH_SALT", "LOGGED_IN_SALT", "NONCE_SALT"))
    return f"""<?php
// written by statstorm lab: WordPress from Debian's package on the lab's own MariaDB
define('DB_NAME', '{DB_NAME}');
define('DB_USER', '{DB_USER}');
define('DB_PASSWORD', '{db.password}');
define('DB_HOST', 'localhost:{db.socket}');
define('DB_CHARSET', 'utf8mb4');
define('DB_COLLATE', '');
{keys}$table_prefix = 'wp_';
// Debian's nginx passes HTTP_HOST without the port ($host); WordPress's canonical redirect
// would then send every request back to the same URL.
if (isset($_SERVER['HTTP_HOST'], $_SERVER['SERVER_PORT'])
    && strpos($_SERVER['HTTP_HOST'], ':') === false && $_SERVER['SERVER_PORT'] != 80) {{
    $_SERVER['HTTP_HOST'] .= ':' . $_SERVER['SERVER_PORT'];
}}
define('WP_HOME', 'http://127.0.0.1:' . ($_SERVER['SERVER_PORT'] ?? '{port}'));
define('WP_SITEURL', WP_HOME);
define('WP_DEFAULT_THEME', '{THEME}');
define('DISABLE_WP_CRON', true);
define('AUTOMATIC_UPDATER_DISABLED', true);
define('WP_AUTO_UPDATE_CORE', false);
define('DISALLOW_FILE_MODS', true);
define('WP_HTTP_BLOCK_EXTERNAL', true);
define('WP_DEBUG', false);
if (!defined('ABSPATH')) {{
    define('ABSPATH', __DIR__ . '/');
}}
require_once ABSPATH . 'wp-settings.php';
"""


# Run from the code directory: php wordpress-install.php TITLE USER EMAIL < password
INSTALLER = r"""<?php
// written by statstorm lab: WordPress's own installer, run unattended from PHP CLI
if (!extension_loaded('mysqli')) {
    fwrite(STDERR, "PHP's mysqli extension is not loaded: install php" . PHP_MAJOR_VERSION . "."
        . PHP_MINOR_VERSION . "-mysql\n");
    exit(3);
}
define('WP_INSTALLING', true);
require getcwd() . '/wp-load.php';
// No mail is sent and no HTTP request leaves (the pretty-permalink probe would ask the
// lab's port, where nothing serves yet): plain permalinks it is.
function wp_new_blog_notification($blog_title, $blog_url, $user_id, $password) {}
add_filter('pre_http_request', function () {
    return new WP_Error('statstorm_lab', 'no HTTP during the lab install');
});
require_once ABSPATH . 'wp-admin/includes/upgrade.php';
if (is_blog_installed()) {
    fwrite(STDERR, "WordPress is already installed in this database\n");
    exit(4);
}
$password = trim((string) fgets(STDIN));
wp_install($argv[1], $argv[2], $argv[3], 0, '', $password);
update_option('permalink_structure', '');
update_option('show_on_front', 'posts');
update_option('blogdescription', '');
if (!is_blog_installed() || get_option('template') !== WP_DEFAULT_THEME) {
    fwrite(STDERR, "wp_install() left no site with the theme " . WP_DEFAULT_THEME . "\n");
    exit(5);
}
echo "statstorm: installed\n";
"""
