"""Who may import whom: the job below `plan`, the pure policy free of Slurm, the Ray ports free of the settings.
Read from the source (every import, also those inside functions), so a lazy import cannot hide a dependency."""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "beam_slurm"


def imported_modules(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def test_nothing_in_slurm_imports_the_plan_verb():
    offenders = {path.name for path in (PACKAGE / "slurm").glob("*.py") if "beam_slurm.plan" in imported_modules(path)}
    assert not offenders, f"slurm/ reaches up into plan.py from {sorted(offenders)}; use beam_slurm.sizing"
    assert "beam_slurm.sizing" in imported_modules(PACKAGE / "plan.py")


def test_requeue_policy_decides_without_running_anything():
    allowed = {"__future__", "__future__.annotations", "dataclasses", "dataclasses.dataclass",
               "beam_slurm.ray_cluster.records", "beam_slurm.ray_cluster.records.EXIT_INFRA",
               "beam_slurm.core.run_record", "beam_slurm.core.run_record.Attempt"}
    assert imported_modules(PACKAGE / "slurm" / "requeue_policy.py") <= allowed


def test_ray_ports_and_settings_import_in_one_direction():
    assert "beam_slurm.ray_cluster.ports" in imported_modules(PACKAGE / "ray_cluster" / "settings.py")
    assert not any(name.startswith("beam_slurm.ray_cluster.settings")
                   for name in imported_modules(PACKAGE / "ray_cluster" / "ports.py"))
