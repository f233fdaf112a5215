"""Rehearsal trainer: stands in for SkyRL where there are no GPUs. It checks the plumbing; it does not train.

    python -m beam_slurm.jobs.training.rehearsal key=value ...      (the same overrides as SkyRL)

Like SkyRL 0.3.0 where it matters to the job around it, it:

* joins the running Ray cluster, reserves one PACK placement group with one ``{"GPU": 1}`` bundle per policy GPU and
  starts one actor per bundle; two actors on one node given the same GPU id is an error (SkyRL issue #1577);
* "loads the model" and runs ``trainer.max_training_steps`` steps over the actors, as long as the costs say;
* checkpoints every ``ckpt_interval`` and at the end in SkyRL's layout (small JSON files), the marker last. A save
  writes and fsyncs ``trainer.rehearsal_save_bytes`` over at least ``trainer.rehearsal_save_s`` before
  ``trainer_state.pt``, so a save cut off by a kill is never resumed from;
* writes HF exports every ``hf_save_interval`` (> 0) and at the end: the files of ``trainer.policy.model.path`` when it
  is a local Hugging Face directory (so ``beam-slurm evaluate`` loads it), else a JSON stand-in no loader takes;
* writes eval dumps in SkyRL's layout every ``eval_interval`` (made-up responses marked ``"rehearsal": true``);
* resumes like SkyRL and logs ``resumed from step N``; writes the progress heartbeat as our SkyRL callback does;
* with ``trainer.rehearsal_hang_at_step=N``, in the job's very first attempt, blocks the last bundle's actor for good
  in step N, as a rank stuck in a collective;
* saves on notice (:mod:`beam_slurm.core.notice`): a request pending at a step's end saves that step (and its
  scheduled HF export), acknowledges, logs ``stopped on notice after saving step N`` and exits 0.

Each finished step appends made-up metrics to ``train_metrics.jsonl``. The costs and the hang (`trainer.rehearsal_*`)
arrive as the environment variables in ``COST_ENV``.

Settings are read with SkyRL's config classes when skyrl is importable (unknown keys rejected), else with OmegaConf
(SkyRL's defaults, other keys unchecked). Exit status: 0 finished or stopped on notice, 2 bad settings, 1 otherwise.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import os
import random
import shutil
import socket
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import OmegaConf

from beam_slurm.config.skyrl_command import COST_ENV
from beam_slurm.core import notice
from beam_slurm.core.atomic_files import sync_directory, write_text
from beam_slurm.core.errors import UserError
from beam_slurm.core.layout import STEP_DIR, environ_attempt_label
from beam_slurm.core.logs import installed
from beam_slurm.core.progress import ProgressRecorder
from beam_slurm.core.ray_records import note_driver_error
from beam_slurm.core.train_metrics import append_step_metrics
from beam_slurm.jobs.ray_cluster.driver_signals import hold_first_sigterm
from beam_slurm.jobs.training import tracking
from beam_slurm.jobs.training.conformance import dapo_config_class

logger = logging.getLogger(__spec__.name)  # its package name under `python -m` too (__name__ is "__main__")

# ray and pyarrow are imported inside the functions, on purpose: only the run needs them, not the settings.

PAYLOAD_FILE = "rehearsal_weights.bin"
_CHUNK = 4 * 1024 * 1024
PG_TIMEOUT_ENV = "BEAM_REHEARSAL_PG_TIMEOUT_S"  # seconds to wait for the placement group (default 120)
STEP_PREFIX = "global_step_"


class SettingsError(UserError, ValueError):
    """A setting the rehearsal cannot run with; the message names the key and the fix."""


@dataclass
class RehearsalSettings:
    """The SkyRL settings the rehearsal honours (names as in SkyRL's config, defaults as SkyRL 0.3.0's)."""

    policy_num_nodes: int = 1
    policy_num_gpus_per_node: int = 1
    max_training_steps: int | None = None  # required: the rehearsal reads no data to derive it from
    ckpt_interval: int = 10  # <= 0 saves only at the end
    hf_save_interval: int = -1
    eval_interval: int = 5
    eval_before_train: bool = True
    ckpt_path: str = field(default_factory=lambda: os.path.expanduser("~/ckpts/"))
    export_path: str = field(default_factory=lambda: os.path.expanduser("~/exports/"))
    resume_mode: str = "latest"
    resume_path: str | None = None
    max_ckpts_to_keep: int = -1
    val_data: list[str] = field(default_factory=list)
    eval_n_samples_per_prompt: int = 1
    run_name: str = "test_run"
    policy_model_path: str | None = None
    parsed_by: str = ""  # SkyRL's config classes or the fallback
    # The costs (COST_ENV), filled from the environment by `parse_settings`.
    step_s: float = 0.0
    save_s: float = 0.0
    save_bytes: int = 0
    model_load_s: float = 0.0
    hang_at_step: int = 0


# RehearsalSettings field -> SkyRL key; the field is the key's last part, but for policy_model_path.
_KEYS = {
    key.rsplit(".", 1)[1]: key
    for key in (
        "trainer.placement.policy_num_nodes",
        "trainer.placement.policy_num_gpus_per_node",
        "trainer.max_training_steps",
        "trainer.ckpt_interval",
        "trainer.hf_save_interval",
        "trainer.eval_interval",
        "trainer.eval_before_train",
        "trainer.ckpt_path",
        "trainer.export_path",
        "trainer.resume_mode",
        "trainer.resume_path",
        "trainer.max_ckpts_to_keep",
        "data.val_data",
        "generator.eval_n_samples_per_prompt",
        "trainer.run_name",
    )
}
_KEYS["policy_model_path"] = "trainer.policy.model.path"


def _lookup(cfg, dotted: str):
    return functools.reduce(
        lambda node, part: node[part] if isinstance(node, dict) else getattr(node, part), dotted.split("."), cfg
    )


def parse_settings(argv: list[str]) -> RehearsalSettings:
    """Read the overrides with SkyRL's config classes when importable, else with OmegaConf."""
    settings = RehearsalSettings()
    try:
        config_cls, _ = dapo_config_class()
        reader = "SkyRL config classes"
    except ImportError:
        config_cls, reader = None, "OmegaConf reader (skyrl not installed; keys not checked)"
    if config_cls is not None:
        try:
            cfg = config_cls.from_cli_overrides(argv)
        except Exception as exc:
            raise SettingsError(f"SkyRL rejects the overrides: {exc}") from exc
    else:
        bad = [a for a in argv if "=" not in a or a.startswith("+")]
        if bad:
            raise SettingsError(f"not key=value overrides: {bad}; pass SkyRL overrides like trainer.ckpt_interval=10")
        cfg = OmegaConf.to_container(OmegaConf.from_cli(argv), resolve=True)
    for name, key in _KEYS.items():
        try:
            setattr(settings, name, _lookup(cfg, key))
        except (KeyError, TypeError):  # the OmegaConf reader: a key not given keeps SkyRL's default
            continue
    settings.parsed_by = reader
    read_costs(settings, os.environ)
    settings.resume_mode = "none" if settings.resume_mode in (None, "None", "null") else str(settings.resume_mode)
    settings.val_data = list(settings.val_data or [])
    _check(settings)
    return settings


def read_costs(settings: RehearsalSettings, environ) -> None:
    """The step, save and model-load costs from the environment; unset ones take the schema's defaults."""
    # Deferred: the batch shell sets every cost; the schema (and Hydra with it) loads only for a rehearsal started
    # by hand.
    from beam_slurm.config.schema import TrainerConfig

    defaults = TrainerConfig()
    for name, (env, key, kind) in COST_ENV.items():
        if not (text := environ.get(env)):
            setattr(settings, name, getattr(defaults, key.rsplit(".", 1)[1]))
            continue
        try:
            value = kind(text)
        except ValueError:
            value = None
        if value is None or value < 0 or (kind is float and not math.isfinite(value)):
            raise SettingsError(f"{key}={text!r} (from {env}): use a {'whole ' if kind is int else ''}number >= 0")
        setattr(settings, name, value)


def _check(s: RehearsalSettings) -> None:
    if not isinstance(s.max_training_steps, int) or s.max_training_steps <= 0:
        raise SettingsError(
            f"trainer.max_training_steps={s.max_training_steps!r}: the rehearsal needs a positive step "
            "count; pass trainer.max_training_steps=50 (or MAX_TRAINING_STEPS)"
        )
    for name in ("policy_num_nodes", "policy_num_gpus_per_node"):
        value = getattr(s, name)
        if not isinstance(value, int) or value < 1:
            raise SettingsError(f"{_KEYS[name]}={value!r}: must be a positive integer")
    if s.resume_mode not in ("none", "latest", "from_path"):
        raise SettingsError(f"trainer.resume_mode={s.resume_mode!r}: use none, latest or from_path")
    if s.resume_mode == "from_path":
        if not s.resume_path:
            raise SettingsError("trainer.resume_mode=from_path needs trainer.resume_path=<ckpt_path>/global_step_N")
        if not Path(s.resume_path).name.startswith(STEP_PREFIX):
            raise SettingsError(
                f"trainer.resume_path={s.resume_path!r}: must name a {STEP_PREFIX}N directory (as SkyRL requires)"
            )
    if s.max_ckpts_to_keep == 0:
        raise SettingsError("trainer.max_ckpts_to_keep=0: use -1 to keep all checkpoints or N > 0 to keep the last N")


def _step_dirs(root: Path) -> dict[int, Path]:
    children = root.iterdir() if root.is_dir() else ()
    return {int(match[1]): child for child in children if child.is_dir() and (match := STEP_DIR.match(child.name))}


def resume_step(s: RehearsalSettings) -> int:
    """The step to resume after (0 = fresh start), decided exactly as SkyRL 0.3.0's load_checkpoints does."""
    root = Path(s.ckpt_path)
    marker = None if s.resume_mode == "from_path" else notice.read_marker(root)
    if s.resume_mode == "none" and marker is not None:
        raise SettingsError(
            f"trainer.resume_mode=none but {root} already holds checkpoints (latest step "
            f"{marker}); they would be overwritten. Use trainer.resume_mode=latest, or a new "
            "trainer.ckpt_path"
        )
    if marker is None and s.resume_mode != "from_path":
        return 0  # none, or latest without a checkpoint: a fresh start
    if s.resume_mode == "latest":
        assert marker is not None  # latest without a marker returned above
        dirs = _step_dirs(root)
        if dirs and max(dirs) - marker > max(s.ckpt_interval, 0):
            raise SettingsError(
                f"inconsistent checkpoint folder {root}: latest_ckpt_global_step.txt names {marker} "
                f"but {dirs[max(dirs)]} is more than ckpt_interval={s.ckpt_interval} steps ahead; move "
                "the checkpoints of the older run away (as SkyRL requires)"
            )
        path = root / f"{STEP_PREFIX}{marker}"
    else:
        assert s.resume_path is not None  # from_path: `_check` requires it
        path = Path(s.resume_path)
    if not (path / "trainer_state.pt").is_file():
        raise SettingsError(f"checkpoint {path} is missing or incomplete (no trainer_state.pt); cannot resume from it")
    return int(path.name[len(STEP_PREFIX) :])


def write_payload(path: Path, size: int, seconds: float) -> float:
    """Write and fsync `size` bytes to `path` over at least `seconds`, sleeping between chunks (a kill during a long
    save finds the file half-written); the seconds it took."""
    started = time.monotonic()
    path.parent.mkdir(parents=True, exist_ok=True)
    block = os.urandom(min(_CHUNK, max(size, 1)))
    written = 0
    with open(path, "wb") as out:
        while written < size:
            n = min(len(block), size - written)
            out.write(block[:n])
            written += n
            out.flush()
            os.fsync(out.fileno())
            ahead = started + seconds * written / size - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)
    if size <= 0 and seconds > 0:
        time.sleep(seconds)
    sync_directory(path.parent)
    return time.monotonic() - started


def save_checkpoint(s: RehearsalSettings, step: int, attempt: int, in_job: int = 0) -> Path:
    """A checkpoint in SkyRL's layout: the policy (and its payload) first, trainer_state.pt after, the marker last."""
    root = Path(s.ckpt_path)
    step_dir = root / f"{STEP_PREFIX}{step}"
    stamp = {
        "rehearsal": True,
        "note": "written by the rehearsal trainer, not SkyRL; not a torch file",
        "global_step": step,
        "attempt": attempt,
        "in_job": in_job,
        "time": time.time(),
    }
    (step_dir / "trainer_state.pt").unlink(missing_ok=True)  # redoing a step: never complete before the payload
    write_text(step_dir / "policy" / "rehearsal_policy.json", json.dumps({**stamp, "what": "policy"}) + "\n")
    if s.save_bytes > 0 or s.save_s > 0:
        logger.info(f"saving step {step}: {s.save_bytes} bytes, at least {s.save_s:g} s")
        took = write_payload(step_dir / "policy" / PAYLOAD_FILE, s.save_bytes, s.save_s)
        rate = f", {s.save_bytes / took / 1e9:.2f} GB/s" if s.save_bytes and took > 0 else ""
        logger.info(f"saved step {step} in {took:.1f} s{rate}")
    write_text(step_dir / "data.pt", json.dumps({**stamp, "what": "dataloader state"}) + "\n")
    write_text(step_dir / "trainer_state.pt", json.dumps({**stamp, "what": "trainer state"}) + "\n")
    write_text(root / notice.MARKER_FILE, str(step))
    if s.max_ckpts_to_keep > 0:  # SkyRL's cleanup: keep the newest N step directories
        dirs = _step_dirs(root)
        for old in sorted(dirs)[: -s.max_ckpts_to_keep]:
            shutil.rmtree(dirs[old])
    return step_dir


def _link_or_copy_tree(source: Path, target: Path) -> tuple[int, int]:
    """Mirror source's files into target (hard links, copies across file systems); (linked, copied) counts."""
    linked = copied = 0
    for folder, subdirs, files in os.walk(source):
        subdirs[:] = sorted(d for d in subdirs if not d.startswith("."))  # .cache/, .git/: not model files
        relative = Path(folder).relative_to(source)
        (target / relative).mkdir(parents=True, exist_ok=True)
        for name in sorted(files):
            if name.startswith("."):
                continue
            src, dst = Path(folder) / name, target / relative / name
            try:
                os.link(src, dst)  # follows symlinks, so hub-cache snapshots link their blobs
                linked += 1
            except OSError:  # another file system (EXDEV) or links not allowed there
                shutil.copy2(src, dst)
                copied += 1
    return linked, copied


def export_hf(s: RehearsalSettings, step: int) -> Path:
    """HF export of ``step``: the base model's files, or a JSON stand-in; returns the policy directory."""
    policy = Path(s.export_path) / f"{STEP_PREFIX}{step}" / "policy"
    base = Path(str(s.policy_model_path)).expanduser() if s.policy_model_path else None
    if base is None or not (base / "config.json").is_file():  # a hub id, missing or unset: not a local HF folder
        write_text(
            policy / "rehearsal_model.json",
            json.dumps(
                {
                    "rehearsal": True,
                    "global_step": step,
                    "what": "HF export stand-in",
                    "why": f"trainer.policy.model.path={s.policy_model_path!r} is not a local Hugging Face directory",
                }
            )
            + "\n",
        )
        return policy
    policy.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".policy.", suffix=".tmp", dir=policy.parent))
    try:
        linked, copied = _link_or_copy_tree(base, staging)
        write_text(
            staging / "rehearsal.json",
            json.dumps(
                {
                    "rehearsal": True,
                    "global_step": step,
                    "base_model": str(base.resolve()),
                    "weights": "the base model's weights, unchanged: the rehearsal trainer does not train",
                    "files_hard_linked": linked,
                    "files_copied": copied,
                },
                indent=1,
            )
            + "\n",
        )
        if policy.exists():  # an earlier attempt exported this step: swap, so `policy` is never half-written
            retired = Path(tempfile.mkdtemp(prefix=".policy.old.", dir=policy.parent))
            os.replace(policy, retired / "policy")
            os.replace(staging, policy)
            shutil.rmtree(retired, ignore_errors=True)
        else:
            os.replace(staging, policy)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return policy


def _data_source(val_file: str) -> str:
    """The file's data_source column (what SkyRL keys its eval dumps by), else the file name without suffix."""
    try:
        import pyarrow.parquet as pq

        column = pq.read_table(val_file, columns=["data_source"]).column("data_source")
        if len(column) and column[0].as_py():
            return str(column[0].as_py()).replace("/", "_")
    except Exception:  # no pyarrow in this interpreter, no such file, no such column: name it after the file
        pass
    stem = Path(val_file).name
    for suffix in (".parquet", ".jsonl", ".json"):
        stem = stem.removesuffix(suffix)
    return stem.replace("/", "_") or "unknown"


def dump_eval(s: RehearsalSettings, step: int, rng: random.Random) -> dict:
    """Eval dump in SkyRL's layout with made-up, well-formed content marked as rehearsal; returns the metrics."""
    out = Path(s.export_path) / "dumped_evals" / f"{STEP_PREFIX}{step}_evals"
    n = max(int(s.eval_n_samples_per_prompt), 1)
    metrics: dict = {}
    sources = [_data_source(f) for f in s.val_data] or ["unknown"]
    for source in sources:
        scores = [1.0 if rng.random() < 0.5 else -1.0 for _ in range(3 * n)]  # 3 problems, n samples each
        lines = [
            json.dumps(
                {
                    "input_prompt": f"[rehearsal] problem {i // n} of {source}",
                    "output_response": f"[rehearsal] made-up response {i % n}. Answer: {i // n}",
                    "score": score,
                    "stop_reason": "stop",
                    "env_class": "aime",
                    "env_extras": {"rehearsal": True},
                    "data_source": source,
                    "rehearsal": True,
                }
            )
            for i, score in enumerate(scores)
        ]
        write_text(out / f"{source}.jsonl", "\n".join(lines) + "\n")
        metrics[f"eval/{source}/avg_score"] = sum(scores) / len(scores)
    metrics["rehearsal"] = True
    write_text(out / "aggregated_results.jsonl", json.dumps(metrics) + "\n")
    return metrics


def place_actors(s: RehearsalSettings, attempt: int):
    """One placement group, one bundle and one actor per GPU; returns (actors, placement report)."""
    import ray
    from ray.util.placement_group import placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    @ray.remote(num_cpus=0, num_gpus=1)
    class GpuSlot:
        def __init__(self, hang_at_step: int = 0):
            self.hang_at_step = hang_at_step

        def where(self) -> dict:
            ctx = ray.get_runtime_context()
            return {
                "hostname": socket.gethostname(),
                "node_ip": ray.util.get_node_ip_address(),
                "node_id": ctx.get_node_id(),
                "gpu_ids": [str(g) for g in ray.get_gpu_ids()],
                "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
            }

        def step(self, seconds: float, step: int = 0) -> float:
            if self.hang_at_step and step == self.hang_at_step:
                while True:  # stuck for good, alive and silent
                    time.sleep(3600)
            time.sleep(seconds)
            return seconds

    world = s.policy_num_nodes * s.policy_num_gpus_per_node
    group = placement_group([{"GPU": 1}] * world, strategy="PACK")
    timeout = float(os.environ.get(PG_TIMEOUT_ENV, "120"))
    ready, _ = ray.wait([group.ready()], timeout=timeout)
    if not ready:
        raise RuntimeError(
            f"placement group of {world} GPU bundles ({s.policy_num_nodes} nodes x "
            f"{s.policy_num_gpus_per_node}) not ready after {timeout:.0f} s; the Ray cluster has "
            f"{ray.cluster_resources().get('GPU', 0):g} GPUs"
        )
    hang_at = [0] * (world - 1) + [s.hang_at_step if attempt == 0 else 0]  # the last bundle's actor hangs
    actors = [
        GpuSlot.options(  # type: ignore[attr-defined]  # ray.remote made it an actor class; its stubs say not
            scheduling_strategy=PlacementGroupSchedulingStrategy(placement_group=group, placement_group_bundle_index=i)
        ).remote(hang_at[i])
        for i in range(world)
    ]
    report = ray.get([a.where.remote() for a in actors])
    seen: dict[tuple[str, str], int] = {}
    for index, slot in enumerate(report):
        for gpu in slot["gpu_ids"]:
            other = seen.setdefault((slot["node_id"], gpu), index)
            if other != index:
                raise RuntimeError(f"actors {other} and {index} on {slot['hostname']} were both given GPU {gpu}")
    return actors, report


def run(s: RehearsalSettings) -> int:
    import ray

    attempt = int(os.environ.get("SLURM_RESTART_COUNT", "0") or 0)
    label = environ_attempt_label(os.environ)  # `1.2` for an in-job restart: only the job's very first attempt hangs
    in_job = int(label.partition(".")[2] or 0)
    start = resume_step(s)
    logger.info(f"resumed from step {start} ({s.resume_mode})" if start else "starting from step 0")
    ray.init(address=os.environ.get("RAY_ADDRESS", "auto"), log_to_driver=False)
    hold_first_sigterm()  # a preemption's SIGTERM to the tasks may be a notice (after ray.init's own handler)
    try:
        actors, report = place_actors(s, 0 if label == "0" else 1)
        nodes = sorted({slot["hostname"] for slot in report})
        logger.info(f"{len(actors)} GPU actors on {len(nodes)} nodes: {', '.join(nodes)}")
        out = Path(s.export_path) / "rehearsal"
        write_text(out / f"placement_attempt_{label}.json", json.dumps(report, indent=1) + "\n")
        heartbeat = ProgressRecorder(s.ckpt_path)
        heartbeat.loading(start)
        if s.model_load_s > 0:
            logger.info(f"loading the model ({s.model_load_s:g} s)")
            time.sleep(s.model_load_s)
        rng = random.Random(f"{s.run_name}:{start}")
        tracker = tracking.open_run(os.environ, s.run_name)  # as SkyRL's W&B logger, when trainer.logger=wandb
        if s.eval_interval > 0 and s.eval_before_train:
            heartbeat.eval_start(start)
            dump_eval(s, start, rng)
            heartbeat.eval_end(start)
        total = s.max_training_steps
        assert total is not None  # `_check` requires a positive step count
        saved_at = hf_at = None
        for step in range(start + 1, total + 1):
            heartbeat.step_start(step)
            ray.get([a.step.remote(s.step_s, step) for a in actors])
            heartbeat.step_end(step)
            progress = step / total
            reward = max(-1.0, min(1.0, math.tanh(3 * progress - 1) + rng.uniform(-0.05, 0.05)))
            metrics = {
                "reward/avg_raw_reward": round(reward, 4),
                "generate/avg_num_tokens": round(950 + 450 * progress + rng.uniform(-20, 20), 1),
                "trainer/global_step": step,
                "time": time.time(),
                "attempt": attempt,
                "in_job": in_job,
                "rehearsal": True,
            }
            append_step_metrics(s.export_path, step, metrics)
            tracking.log(tracker, metrics, step)
            request = notice.pending_request(s.ckpt_path)
            if (s.ckpt_interval > 0 and step % s.ckpt_interval == 0) or request is not None:
                save_checkpoint(s, step, attempt, in_job)
                saved_at = step
                heartbeat.saved(step)
            # As in SkyRL, a step's scheduled HF export is written even when the step was saved on notice.
            if s.hf_save_interval > 0 and step % s.hf_save_interval == 0:
                export_hf(s, step)
                hf_at = step
            if request is not None:
                notice.acknowledge(s.ckpt_path, step)
                logger.info(
                    f"stopped on notice after saving step {step} ({request.get('reason')}); resume with "
                    "trainer.resume_mode=latest"
                )
                return 0
            if s.eval_interval > 0 and (step % s.eval_interval == 0 or step == total):
                heartbeat.eval_start(step)
                dump_eval(s, step, rng)
                heartbeat.eval_end(step)
            logger.info(f"step {step}/{total} done")
        if start < total:
            if saved_at != total:
                save_checkpoint(s, total, attempt, in_job)
            if s.hf_save_interval > 0 and hf_at != total:
                export_hf(s, total)
        heartbeat.finished(total)
        logger.info(f"training done: {total} steps")
        return 0
    finally:
        ray.shutdown()


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        settings = parse_settings(args)
        with installed("beam_slurm", "[rehearsal] ", stream="stdout"):
            logger.info(f"settings read with {settings.parsed_by}; this run checks the plumbing, it does not train")
            return run(settings)
    except SettingsError as exc:
        print(f"rehearsal: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:
        note_driver_error(exc)  # a full checkpoint storage or a dead Ray worker: the requeue policy reads it
        raise


if __name__ == "__main__":
    sys.exit(main())
