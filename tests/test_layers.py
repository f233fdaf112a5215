"""The import contracts in pyproject.toml ([tool.importlinter]) hold, checked by import-linter from the source."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_import_contracts_hold():
    lint = Path(sys.executable).with_name("lint-imports")
    done = subprocess.run([str(lint), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout, done.stdout[-3000:]


DEFERRED_LIBRARIES = {"ray", "torch", "vllm", "matplotlib", "wandb", "pyarrow", "huggingface_hub", "math_verify",
                      "skyrl", "examples"}
"""Heavy or optional outside libraries that a function may import (each module says why in a comment)."""


def test_imports_are_at_module_level_except_the_deferred_libraries():
    """A function imports only a deferred library, or a module of ours under a `Deferred:` comment saying why."""
    misplaced = []
    for path in sorted((ROOT / "beam_slurm").rglob("*.py")):
        source = path.read_text()
        lines = source.splitlines()
        functions = [n for n in ast.walk(ast.parse(source)) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
        for node in {id(n): n for f in functions for n in ast.walk(f) if isinstance(n, (ast.Import, ast.ImportFrom))
                     }.values():
            module = node.module if isinstance(node, ast.ImportFrom) else node.names[0].name
            top = (module or "").split(".")[0]
            if top in DEFERRED_LIBRARIES:
                continue
            said = "\n".join(lines[max(0, node.lineno - 4):node.lineno - 1])
            if top == "beam_slurm" and ("Deferred:" in said or "Imported by module name" in said):
                continue
            misplaced.append(f"{path.relative_to(ROOT)}:{node.lineno}: {lines[node.lineno - 1].strip()}")
    assert not misplaced, "imports inside functions (move them to the top of the module):\n" + "\n".join(misplaced)
