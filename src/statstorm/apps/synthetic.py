"""A generated, deterministic Composer-style PHP application for the lab and the tests.

The tree looks like what a modern PHP app with some legacy code costs in metadata calls:

- `vendor/<vendor>/<package>/src/...`: N packages, PSR-4 autoloaded through the real
  Composer `vendor/autoload.php` + `vendor/composer/ClassLoader.php` (non-authoritative, so
  every class lookup probes the file system with `file_exists`). Every third package maps its
  namespace to two directories (`lib/` first, then `src/`), so finding its classes costs an
  extra failed probe, as in real multi-directory PSR-4 maps.
- `lib/legacy/helper_*.php`: legacy helpers loaded with relative `require_once` through an
  include_path of several entries where only the last one holds them.
- `public/index.php`: the entry script. Each request autoloads `touch` classes, includes the
  legacy helpers, and probes `missing` class names that do not exist (class_exists storms).
- `statstorm-app.json`: the manifest: the flags it was made with and what a request touches.

Same seed and flags, same bytes: names come from a seeded PRNG and Composer's autoloader
suffix is fixed.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from statstorm.env import Env
from statstorm.errors import DependencyError, UsageError

MANIFEST = "statstorm-app.json"
_WORDS = (
    "acme alpha atlas beacon cargo cedar cobalt delta ember falcon forge harbor helix "
    "indigo iris juniper kestrel lumen maple meridian nimbus onyx orbit pixel quartz "
    "raven sable solstice tango terra umber vector willow xenon yarrow zephyr"
).split()
_NOUNS = (
    "Cache Config Console Container Crypto Event Filesystem Form Http Intl Log Mailer "
    "Mime Parser Process Queue Routing Security Serializer String Template Translation "
    "Validator Yaml Json Stream Uri Session Storage Util"
).split()


@dataclass(frozen=True)
class AppSpec:
    seed: int = 1
    packages: int = 20
    classes: int = 10  # per package
    depth: int = 2  # sub-namespace levels under each package's root
    touch: int = 100  # classes autoloaded per request
    legacy_files: int = 20  # legacy helpers required per request
    include_path_entries: int = 4  # only the last holds the helpers
    missing: int = 5  # class_exists() probes of classes that do not exist, per request
    user_ini: bool = False  # write public/.user.ini

    def validate(self) -> None:
        for name in ("packages", "classes", "include_path_entries"):
            if getattr(self, name) < 1:
                raise UsageError(f"--{name.replace('_', '-')} must be at least 1")
        for name in ("depth", "touch", "legacy_files", "missing"):
            if getattr(self, name) < 0:
                raise UsageError(f"--{name.replace('_', '-')} must not be negative")
        if self.depth > 12:
            raise UsageError("--depth must be at most 12")
        if self.touch > self.packages * self.classes:
            raise UsageError(
                f"--touch {self.touch} is more than the {self.packages * self.classes} classes "
                f"generated: raise --packages or --classes"
            )


@dataclass(frozen=True)
class GeneratedApp:
    root: Path
    spec: AppSpec
    docroot: Path
    entry: str  # relative to docroot
    php_files: int
    include_path: list[str]  # relative to root
    expected_classes: int
    expected_legacy: int

    def include_path_for(self, code_root: str) -> str:
        return ":".join(f"{code_root}/{p}" for p in self.include_path)


def generate(env: Env, root: Path, spec: AppSpec, *, force: bool = False) -> GeneratedApp:
    """Write the app into `root` (created; must be empty unless `force`)."""
    spec.validate()
    if root.exists() and any(root.iterdir()):
        if not force:
            raise UsageError(f"{root} is not empty: pick an empty directory or pass --force")
        if not (root / MANIFEST).exists():
            raise UsageError(f"{root} is not a statstorm app (no {MANIFEST}); refusing to overwrite it")
    composer = shutil.which("composer")
    if composer is None:
        raise DependencyError("composer is not installed: run scripts/setup.sh --lab as root")
    rng = random.Random(spec.seed)
    tmp = Path(tempfile.mkdtemp(prefix=".statstorm-gen-", dir=root.parent if root.parent.exists() else None))
    try:
        os.chmod(tmp, 0o755)  # mkdtemp makes it 0700; the web server must read it
        _write_tree(tmp, spec, rng)
        _composer_dump(env, composer, tmp)
        root.parent.mkdir(parents=True, exist_ok=True)
        # The old app (if any) goes only once the new one is complete.
        if root.exists():
            shutil.rmtree(root)
        os.replace(tmp, root)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return load(root)


def load(root: Path) -> GeneratedApp:
    """Read a generated app back from its manifest."""
    try:
        data = json.loads((root / MANIFEST).read_text())
        spec = AppSpec(**data["spec"])
    except FileNotFoundError:
        raise UsageError(f"{root} has no {MANIFEST}: make it with `statstorm lab gen-app`") from None
    except (ValueError, KeyError, TypeError) as exc:
        raise UsageError(f"{root / MANIFEST} is damaged ({exc}): generate the app again") from None
    return GeneratedApp(
        root=root, spec=spec, docroot=root / "public", entry="index.php",
        php_files=data["php_files"], include_path=data["include_path"],
        expected_classes=data["expected_classes"], expected_legacy=data["expected_legacy"],
    )


def tree_digest(root: Path) -> str:
    """A digest of every file's relative path and bytes, for determinism checks."""
    h = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        h.update(str(path.relative_to(root)).encode())
        h.update(b"\0")
        h.update(path.read_bytes())
    return h.hexdigest()


def _studly(word: str) -> str:
    return word[:1].upper() + word[1:]


def _write_tree(root: Path, spec: AppSpec, rng: random.Random) -> None:
    installed: list[dict[str, object]] = []
    classes: list[str] = []
    php_files = 0
    vendors = rng.sample(_WORDS, k=min(len(_WORDS), max(1, (spec.packages + 2) // 3)))
    for i in range(spec.packages):
        vendor = vendors[i % len(vendors)]
        noun = _NOUNS[i % len(_NOUNS)]
        pkg = f"{noun.lower()}{'' if i < len(_NOUNS) else i // len(_NOUNS)}"
        namespace = f"{_studly(vendor)}\\{noun}{'' if i < len(_NOUNS) else i // len(_NOUNS)}\\"
        two_dirs = i % 3 == 2
        dirs = ["lib/", "src/"] if two_dirs else ["src/"]
        pkg_dir = root / "vendor" / vendor / pkg
        for k in range(spec.classes):
            sub = [rng.choice(_NOUNS) for _ in range(spec.depth)]
            cls = f"{rng.choice(_NOUNS)}{k}"
            fqcn = namespace + "".join(s + "\\" for s in sub) + cls
            path = pkg_dir / "src" / Path(*sub, f"{cls}.php") if sub else pkg_dir / "src" / f"{cls}.php"
            path.parent.mkdir(parents=True, exist_ok=True)
            ns = fqcn.rsplit("\\", 1)[0]
            path.write_text(
                f"<?php\n\ndeclare(strict_types=1);\n\nnamespace {ns};\n\n"
                f"final class {cls}\n{{\n    public function value(): int\n    {{\n"
                f"        return {rng.randrange(1000)};\n    }}\n}}\n"
            )
            classes.append(fqcn)
            php_files += 1
        if two_dirs:
            (pkg_dir / "lib").mkdir(parents=True, exist_ok=True)
            (pkg_dir / "lib" / "README").write_text("legacy sources (none left)\n")
        (pkg_dir / "composer.json").write_text(json.dumps({
            "name": f"{vendor}/{pkg}", "type": "library",
            "autoload": {"psr-4": {namespace: dirs if two_dirs else dirs[0]}},
        }, indent=4) + "\n")
        installed.append({
            "name": f"{vendor}/{pkg}", "version": "1.0.0", "version_normalized": "1.0.0.0",
            "type": "library", "install-path": f"../{vendor}/{pkg}",
            "autoload": {"psr-4": {namespace: dirs if two_dirs else dirs[0]}},
        })

    # Legacy helpers behind a multi-entry include_path.
    include_path = [f"lib/inc{j}" for j in range(1, spec.include_path_entries)] + ["lib"]
    for entry in include_path:
        (root / entry).mkdir(parents=True, exist_ok=True)
    legacy = root / "lib" / "legacy"
    legacy.mkdir(parents=True, exist_ok=True)
    for j in range(spec.legacy_files):
        (legacy / f"helper_{j}.php").write_text(
            f"<?php\n\nfunction statstorm_helper_{j}(int $x): int\n{{\n    return $x + {j};\n}}\n"
        )
        php_files += 1

    touched = rng.sample(classes, k=spec.touch)
    missing = [f"{c.rsplit(chr(92), 1)[0]}\\Missing{m}" for m, c in
               enumerate(rng.sample(classes, k=min(spec.missing, len(classes))))]
    missing += [f"Nowhere\\Missing{m}" for m in range(spec.missing - len(missing))]
    public = root / "public"
    public.mkdir(parents=True, exist_ok=True)
    (public / "index.php").write_text(_entry_script(touched, missing, include_path, spec))
    php_files += 1
    if spec.user_ini:
        (public / ".user.ini").write_text("; statstorm synthetic app\nmax_execution_time = 30\n")
    (root / "composer.json").write_text(json.dumps({
        "name": "statstorm/synthetic-app", "type": "project",
        "description": "generated by statstorm lab gen-app",
        # Composer autoloads only the packages the root requires.
        "require": {str(pkg["name"]): "1.0.0" for pkg in installed},
        "config": {"autoloader-suffix": f"StatstormSeed{spec.seed}"},
    }, indent=4) + "\n")
    (root / "vendor" / "composer").mkdir(parents=True, exist_ok=True)
    (root / "vendor" / "composer" / "installed.json").write_text(json.dumps(
        {"packages": installed, "dev": False, "dev-package-names": []}, indent=4) + "\n")
    manifest = {
        "generator": "statstorm lab gen-app",
        "spec": asdict(spec),
        "php_files": php_files,
        "include_path": include_path,
        "expected_classes": spec.touch,
        "expected_legacy": spec.legacy_files,
        "missing_classes": missing,
    }
    (root / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")


def _entry_script(touched: list[str], missing: list[str], include_path: list[str],
                  spec: AppSpec) -> str:
    cls_list = ",\n".join(f"    {c!r}" for c in touched)
    cls_list = cls_list.replace("\\\\", "\\")
    miss_list = ",\n".join(f"    {m!r}" for m in missing).replace("\\\\", "\\")
    ip = ", ".join(f"$root . '/{p}'" for p in include_path)
    requires = "\n".join(f"require_once 'legacy/helper_{j}.php';" for j in range(spec.legacy_files))
    calls = " + ".join(f"statstorm_helper_{j}(1)" for j in range(spec.legacy_files)) or "0"
    return f"""<?php
// statstorm synthetic app (seed {spec.seed}): one request autoloads {spec.touch} classes,
// requires {spec.legacy_files} legacy helpers through the include_path and probes
// {spec.missing} missing classes.
declare(strict_types=1);

$root = dirname(__DIR__);
require $root . '/vendor/autoload.php';

// Legacy code expects its directories on the include_path. The lab sets it in the pool;
// when run elsewhere (php CLI), set it here.
$want = implode(PATH_SEPARATOR, [{ip}]);
if (strpos(get_include_path(), $root . '/lib') === false) {{
    set_include_path($want . PATH_SEPARATOR . get_include_path());
}}
{requires}

$classes = [
{cls_list}
];
$sum = 0;
foreach ($classes as $class) {{
    $sum += (new $class())->value();
}}
$missing = [
{miss_list}
];
$found = 0;
foreach ($missing as $class) {{
    $found += class_exists($class) ? 1 : 0;
}}
$sum += {calls};

$loaded = 0;
foreach (get_declared_classes() as $c) {{
    if (in_array($c, $classes, true)) {{
        $loaded++;
    }}
}}
$result = [
    'app' => 'statstorm-synthetic',
    'seed' => {spec.seed},
    'classes' => $loaded,
    'legacy' => {spec.legacy_files},
    'missing_found' => $found,
    'included_files' => count(get_included_files()),
    'sum' => $sum,
];
if (($_GET['format'] ?? '') === 'json' || PHP_SAPI === 'cli') {{
    header('Content-Type: application/json');
    echo json_encode($result), "\\n";
}} else {{
    echo "<!doctype html>\\n<html><head><title>statstorm synthetic app</title></head><body>\\n";
    echo "<h1>statstorm synthetic app</h1>\\n";
    foreach ($result as $k => $v) {{
        echo "<p id=\\"$k\\">$k=$v</p>\\n";
    }}
    echo "</body></html>\\n";
}}
"""


def _composer_dump(env: Env, composer: str, root: Path) -> None:
    home = Path(tempfile.mkdtemp(prefix="statstorm-composer-"))
    try:
        env.run(
            [composer, "dump-autoload", "--no-interaction", "--no-scripts", "--quiet"],
            cwd=root, timeout=120, what="composer dump-autoload",
            env={"COMPOSER_ALLOW_SUPERUSER": "1", "COMPOSER_HOME": str(home),
                 "COMPOSER_CACHE_DIR": str(home / "cache"), "COMPOSER_NO_AUDIT": "1"},
        )
    finally:
        shutil.rmtree(home, ignore_errors=True)
