"""The typed recipe: one dataclass per section, a sentence under every field.

Hydra composes `conf/` into these classes (see `beam_slurm.config.load`); unknown keys are rejected by name and
`beam_slurm.config.validation` checks the arithmetic before anything is submitted. Values the seed recipe gives are
marked "seed"; values the seed leaves open and we chose are marked "ours" and stay overridable.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hydra_plugins.hydra_submitit_launcher.config import SlurmQueueConf

from beam_slurm.config.choices import (
    AttentionField,
    ExecutorBackendField,
    KvCacheDtypeField,
    PrecisionField,
    QuantizationField,
    RecipeBackendField,
    ResumeModeField,
    WandbModeField,
)
from beam_slurm.config.container import ContainerSettings
from beam_slurm.config.data import DataConfig
from beam_slurm.config.ray import RaySettings


@dataclass
class ClusterConfig:
    """Slurm resources of the training job."""

    nodes: int = 4
    """Nodes that train: the Ray step's (seed: 2 for LoRA-16, 4 for LoRA-32, 8 for BF16/MXFP8). The allocation is
    these plus cluster.spare_nodes."""
    spare_nodes: int = 0
    """Hot spares: the allocation holds cluster.nodes + this many nodes (`submit` renders `--nodes` so; with plain
    sbatch pass `--nodes=` the sum). Spares take no part in the Ray step; a node that fails is replaced by one in
    the next in-job attempt, without a requeue. They cost their GPU-hours all the time (`plan` says how many)."""
    gpus_per_node: int = 8
    """GPUs per node; the seed's nodes are 8 x B200."""
    partition: str | None = None
    """Slurm partition (`--partition`), or a comma-separated list (env SBATCH_PARTITION); empty = the cluster's
    default."""
    account: str | None = None
    """Slurm account (`--account`, env SBATCH_ACCOUNT); empty = the user's default."""
    qos: str | None = None
    """Slurm QOS (`--qos`, env SBATCH_QOS); empty = none."""
    time_limit: str | None = "24:00:00"
    """Wall time per attempt (`--time`: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM:SS or UNLIMITED; env SBATCH_TIMELIMIT,
    as sbatch reads it). A requeued attempt gets the same limit again (ours)."""
    cpus_per_node: int | None = None
    """CPUs per node for the Ray step (`--cpus-per-task` with one task per node); empty = what Slurm gives."""
    mem_per_node: str | None = None
    """Memory per node (`--mem`, e.g. 1800G or 0 for all); empty = the partition's default."""
    signal_before_s: int = 300
    """Seconds before the time limit at which Slurm sends USR1 to the batch shell (`--signal=B:USR1@N`); the save
    on notice must fit in this window (Slurm may send it up to 60 s early)."""
    grace_s: int = 180
    """Seconds to wait for the checkpoint after a notice before stopping Ray anyway. grace_s + stop_grace_s must fit
    in signal_before_s, so the requeue happens before the time limit."""
    stop_grace_s: int = 45
    """Seconds the Ray step gets to stop (driver, then each node's Ray) after SIGTERM before it is killed."""
    max_requeues: int = 10
    """Stop requeuing after this many restarts (SLURM_RESTART_COUNT) so a crash loop cannot burn the allocation."""
    hang_timeout_s: float | None = None
    """Hang watchdog: the longest a phase of training (a step, a save, an evaluation) may go without a heartbeat
    before the attempt is ended as a hang (stack dumps of every node in `<attempt>/hang/`, then the requeue
    policy). Unset: 5 x the median step time measured, at least 600 s (trainer.expected_step_s until a step is
    measured); 0: off. Bring-up with the model load and the first step, a save and an evaluation get allowances on
    top (`plan` shows them). SkyRL's NCCL timeout (SKYRL_WORKER_NCCL_TIMEOUT_IN_S) is set above it, so the
    watchdog fires first."""
    max_in_job_attempts: int = 2
    """In-job restarts per allocation: after a node, hang or infrastructure failure the batch shell starts a new Ray
    step in the same allocation (on the healthy nodes and spares, from the latest checkpoint) instead of requeueing,
    up to this many times; then it requeues. 0: every failure requeues. Ours: 2 (a restart costs about a minute;
    a third fault in one allocation points at the allocation, and the no-progress guard counts these too)."""
    max_attempts_without_progress: int = 2
    """Stop requeuing (the job ends FAILED, `status` says why) after this many attempts in a row ended by a failure
    (node, driver, time limit, a notice whose save missed) without a checkpoint newer than the attempt started
    from; attempts ended by preemption or by the operator do not count. 0 turns the guard off (ours: 2)."""
    extra_sbatch_args: list[str] = field(default_factory=list)
    """Extra `sbatch` options passed through verbatim as separate arguments (e.g. `--exclusive=user`)."""
    constraint: str | None = None
    """Node features every job of the run asks for (`--constraint`, e.g. `h100&ib`); empty = none (a site profile
    usually sets it)."""
    setup: list[str] = field(default_factory=list)
    """Shell lines the training job's batch shell runs before its Python, e.g. `module load cuda/12.8` (a site
    profile usually sets them); what they export reaches every node's Ray step. Empty = none."""
    ask_slurm_on_submit: bool = True
    """`submit` (its dry run too) asks Slurm with `sbatch --test-only` whether it would take each job, and refuses
    what Slurm refuses; false where the submit host cannot reach the controller."""
    allow_no_checkpoint: bool = False
    """`submit` refuses a run whose attempts cannot reach a checkpoint within cluster.time_limit (`plan`'s "one
    attempt" row says why); true submits it anyway."""
    check_paths_on_submit: bool = True
    """`plan` and `submit` check on the submit host that the paths the job will read exist (model, SkyRL checkout,
    data files); set false where login nodes do not mount the compute storage (the job's preflight still checks
    them on every node)."""
    storage_write_gbytes_per_s: float = 1.0
    """Write bandwidth of the checkpoint storage per node in GB/s, all nodes writing at once (ours: 1.0, a shared
    parallel file system under load). `plan` sizes the save in the notice budget with it; the preflight measures it
    on every node (storage_write.json in the attempt's log folder) and the job warns when the measure breaks the
    budget. A full checkpoint (~0.9 TB per node) fits a 300 s notice only above ~3 GB/s."""
    storage_probe_s: float = 5.0
    """Seconds the preflight's write probe runs at most on each node (it also stops once 1 GiB is written and
    fsynced); 0 skips it, and the job's budget then uses storage_write_gbytes_per_s (ours: 5)."""
    interruptions_per_day: float = 1.0
    """Expected interruptions without a notice per day of one running job: node failures, crashes, a preemption
    that signals nobody (ours: 1.0). Sets the checkpoint interval `plan` advises (Young/Daly); interruptions with a
    notice lose no steps and do not count here."""
    log_copy_s: float = 30.0
    """Seconds the notice budget sets aside for copying each node's logs to shared storage after Ray stops (ours).
    Each node's last copy of its Ray logs stops after this long (`beam_slurm.jobs.ray_cluster.log_copy`)."""
    log_copy_interval_s: float = 180.0
    """Seconds between two copies of each node's Ray session logs to `<log_dir>/<jobid>-<attempt>/ray/<node>/` while
    the attempt runs (one more copy at its end); what a node killed at once (SIGKILL) leaves is its last periodic
    copy. 0 copies only at the end (ours)."""
    log_copy_max_mbytes: float = 256.0
    """MiB of Ray logs each node copies at most per attempt, newest files first; older files are left out and
    counted in the node's COPY.json (ours)."""
    fabric_check: bool = True
    """Before Ray starts, the preflight moves data between every node of the allocation over the fabric
    (torch.distributed: NCCL with one process per GPU on GPU nodes, gloo on CPU-only nodes): point-to-point with
    each ring neighbour, then one all_reduce. It fails the job naming each node that does not answer within
    fabric_check_timeout_s, whose bandwidth is below half the median, whose fabric interface is down, or on which
    ray.network_interface / NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME name no interface. Time, bandwidth and interface
    go to the attempt's log (fabric.json). Needs torch where the preflight runs (the training image has it; a node
    without it skips the check with a warning). Single-node jobs check the interfaces only (ours: on)."""
    fabric_check_timeout_s: float = 30.0
    """Seconds every node has to join the fabric check, and each pair to answer (ours)."""
    fabric_check_bytes: int = 64 * 1024**2
    """Bytes each pair of the fabric check sends each way, three times, and the size of the all_reduce (ours: 64 MiB;
    raise it where the fabric is fast enough that 64 MiB takes under a millisecond)."""
    fabric_interface: str = ""
    """Network interface the fabric check runs over (e.g. ib0, or fab0 on the sandbox). Empty: the one interface
    NCCL_SOCKET_IFNAME names in trainer.extra_env or ray.extra_env, else ray.network_interface, else the network
    the node's hostname resolves to."""


@dataclass
class PathsConfig:
    """Where the model, data, outputs and the SkyRL checkout live. All must be the same path on every node."""

    model_path: str | None = None
    """Beam checkpoint directory (env MODEL_PATH); ~1 TB in BF16, on shared storage."""
    data_dir: str | None = None
    """Directory with the cleaned parquet files from `beam-slurm prepare-data` (env DATA_DIR)."""
    ckpt_path: str | None = None
    """Checkpoint directory (env CKPT_PATH); empty = $HOME/ckpts/<run_name> (seed)."""
    export_path: str | None = None
    """HF exports and evaluation dumps (env EXPORT_PATH); empty = $HOME/exports/<run_name> (seed)."""
    skyrl_dir: str | None = None
    """SkyRL checkout with Beam support (beam-release branch), same path on every node (env SKYRL_DIR)."""
    log_dir: str | None = None
    """Job logs, one folder per job and attempt (env BEAM_LOG_DIR); empty = <export_path>/logs."""
    optimizer_state_disk_dir: str | None = None
    """Node-local NVMe directory for the streamed optimizer state of full fine-tuning (env OPTIMIZER_STATE_DISK_DIR).
    Empty = CPU optimizer, which needs ~1.7 TB host RAM per node (seed)."""
    train_file: str = "dapo-math-17k-cleaned.parquet"
    """Training parquet inside data_dir (seed)."""
    eval_files: list[str] = field(default_factory=lambda: ["aime-2025-cleaned.parquet", "aime-2024-cleaned.parquet"])
    """Evaluation parquets inside data_dir: AIME2025 (the reported benchmark) and AIME2024 (seed)."""


@dataclass
class LoraConfig:
    """LoRA adapters. rank 0 = full-parameter training."""

    rank: int = 64
    """Adapter rank; 0 turns LoRA off (seed: 64)."""
    alpha: int = 64
    """Adapter alpha (seed: 64)."""
    target_modules: str = "all-linear"
    """Which layers get adapters (seed: all linear layers)."""
    per_expert_slots: bool = True
    """vLLM keeps one adapter slot per MoE expert (seed's LoRA extra)."""
    pinned_host_staging: bool = True
    """Stage adapter weights in pinned host memory when syncing them to vLLM (seed's LoRA extra)."""
    sequence_parallel_regather: bool = True
    """Re-gather sequence-parallel inputs before the LoRA matmuls (seed's LoRA extra)."""


@dataclass
class MegatronConfig:
    """Megatron parallelism of the trainer. world = nodes_for_training x gpus_per_node = TP x PP x CP x DP."""

    tensor_parallel: int = 4
    """Tensor parallel size (seed LoRA: TP4)."""
    pipeline_parallel: int = 2
    """Pipeline parallel size (seed LoRA: PP2)."""
    context_parallel: int = 1
    """Context parallel size (ours: 1; 10K-token sequences fit)."""
    expert_parallel: int = 8
    """Expert parallel size (seed LoRA: EP8)."""
    expert_tensor_parallel: int = 1
    """Tensor parallel size inside each expert (ours: 1)."""
    micro_batch_size: int = 1
    """Sequences per forward/backward micro-batch per data-parallel rank (ours)."""


@dataclass
class RolloutConfig:
    """vLLM generation engines."""

    num_engines: int | None = None
    """vLLM replicas; empty = derived: colocated -> training GPUs / (TP x PP), else rollout_nodes x GPUs / (TP x PP)."""
    tensor_parallel: int = 8
    """vLLM tensor parallel size per replica (seed: TP8)."""
    pipeline_parallel: int = 2
    """vLLM pipeline parallel size per replica (seed: PP2)."""
    gpu_memory_utilization: float = 0.8
    """Fraction of GPU memory vLLM may take (ours; lower it when colocated training runs out of memory)."""
    kv_cache_dtype: KvCacheDtypeField = "auto"
    """KV cache dtype (env KV_CACHE_DTYPE): auto (= BF16, seed default) or fp8_e4m3 (faster decode, ~0.01 higher
    log-prob gap)."""
    quantization: QuantizationField | None = None
    """vLLM weight quantization; set to mxfp8 by precision=mxfp8 (MXFP8 rollouts)."""
    attention: AttentionField = "fa4"
    """Flash Attention version for rollouts: fa4 or fa2 (fa2 lowers the MXFP8 log-prob gap from ~0.03 to ~0.02)."""
    executor_backend: ExecutorBackendField = "auto"
    """vLLM's distributed executor: mp (a replica within one node), ray (a replica spanning nodes, as the seed's
    TP8 x PP2 does) or auto (mp when TP x PP fits a node, else ray). Stock SkyRL 0.3.0 accepts Rollout Routing
    Replay only with mp; the seed's Beam branch of SkyRL is needed for R3 with replicas spanning nodes."""
    routing_replay: bool = True
    """Rollout Routing Replay (R3): vLLM returns routed experts and Megatron replays them (seed)."""


@dataclass
class BatchConfig:
    """Batch arithmetic of one training step."""

    prompts_per_step: int = 64
    """Prompts per training step (SkyRL train_batch_size; seed: 64, or 32 on 16 GPUs)."""
    responses_per_prompt: int = 8
    """Responses sampled per prompt, the GRPO group size (seed: 8)."""
    mini_batches: int = 2
    """Optimizer updates per step: prompts_per_step / policy_mini_batch_size (seed: 2, or 1 on 16 GPUs)."""


@dataclass
class GenerationConfig:
    """Sampling for training rollouts and evaluation."""

    max_prompt_tokens: int = 2048
    """Prompt token budget (seed)."""
    max_response_tokens: int = 8192
    """Response token budget (seed)."""
    temperature: float = 1.0
    """Sampling temperature (seed)."""
    top_p: float = 1.0
    """Nucleus sampling (seed)."""
    reasoning_effort: str = "minimal"
    """Passed to Beam's chat template as reasoning_effort (seed: minimal)."""


@dataclass
class AlgorithmConfig:
    """GRPO with the DAPO refinements."""

    advantage_estimator: str = "grpo"
    """Group-relative advantages (seed)."""
    eps_clip_low: float = 0.2
    """Lower PPO clip (DAPO clip-higher: 0.2)."""
    eps_clip_high: float = 0.28
    """Upper PPO clip, wider than the lower one (DAPO clip-higher: 0.28)."""
    loss_reduction: str = "token_mean"
    """Token-level loss averaging (DAPO)."""
    use_kl_loss: bool = False
    """KL penalty against the reference model; off in DAPO (SkyRL's default is on, so we set it)."""
    dynamic_sampling: bool = False
    """DAPO dynamic sampling (drop all-same-reward groups); off (seed)."""
    overlong_buffer_len: int = 4096
    """DAPO overlong penalty ramp length in tokens before max_response_tokens (ours: SkyRL's DAPO example)."""
    overlong_penalty_factor: float = 1.0
    """Penalty at the budget's end; responses past the budget score 0 (ours: SkyRL's DAPO example)."""
    lr: float | None = None
    """Learning rate; empty = 1e-5 for LoRA (seed), 1e-6 for full fine-tuning (ours)."""
    geo_mask: bool = False
    """Geometric sequence masking: drop sequences whose geometric-mean ratio leaves [geo_mask_low, geo_mask_high]
    (seed: on for MXFP8)."""
    geo_mask_low: float = 0.99
    """Lower bound of geometric sequence masking (seed)."""
    geo_mask_high: float = 1.01
    """Upper bound of geometric sequence masking (seed)."""
    fused_lm_head_logprob: bool = True
    """Fused LM-head log-probabilities with logit softcapping (seed's LoRA extra; harmless for full FT)."""


@dataclass
class EvalLauncherConfig(SlurmQueueConf):  # type: ignore[misc]  # the launcher plugin has no type information
    """Slurm settings of the evaluation job array (`beam-slurm evaluate`), with the keys and classes of Hydra's submitit
    launcher (hydra/launcher=submitit_slurm: partition, timeout_min, gpus_per_node, nodes, array_parallelism, qos,
    account, constraint, exclude, setup, additional_parameters, ...), so a user's launcher settings carry over. The
    fields below change the launcher's defaults; the others keep them."""

    submitit_folder: str = ""
    """Where submitit keeps each task's pickles and logs; empty = <evaluation folder of the first task>/.submitit."""
    name: str = "beam-eval"
    """Slurm job name of the array."""
    timeout_min: int = 240
    """Wall time of one array task in minutes (ours); a task cut off by it is requeued (max_num_timeout) and resumes."""
    nodes: int = 0
    """Nodes per task; 0 = as many as rollout.tensor_parallel x rollout.pipeline_parallel GPUs need
    (cluster.gpus_per_node
    each): Beam's TP8 x PP2 takes 2 nodes, driven through Ray."""
    gpus_per_node: int | None = None
    """GPUs per node of a task; empty = TP x PP, at most cluster.gpus_per_node."""
    partition: str | None = None
    """Slurm partition of the array; empty = cluster.partition."""
    account: str | None = None
    """Slurm account of the array; empty = cluster.account."""
    array_parallelism: int = 8
    """Tasks of the array running at once (`--array=0-N%P`; ours: 8)."""
    max_num_timeout: int = 3
    """Requeues after a time-out (a preemption always requeues); the task resumes from its saved responses (ours)."""
    cpus_per_task: int | None = None
    """CPUs per task (`--cpus-per-task`); empty = Slurm's default."""
    tasks_per_node: int = 1
    """Tasks per node; one process per node drives vLLM (leave 1)."""
    mem_gb: int | None = None
    """Memory per node in GB (`--mem`); empty = the partition's default."""
    stderr_to_stdout: bool = False
    """Write the task's stderr into its stdout log."""
    _target_: str = "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher"
    """The launcher class of Hydra's config (accepted so copied launcher settings load; not used here)."""
    qos: str | None = None
    """Slurm QOS of the array; empty = cluster.qos."""
    comment: str | None = None
    """Slurm job comment."""
    constraint: str | None = None
    """Node features the tasks need (`--constraint`)."""
    exclude: str | None = None
    """Nodes the tasks must not use (`--exclude`)."""
    gres: str | None = None
    """Generic resources (`--gres`), instead of gpus_per_node."""
    cpus_per_gpu: int | None = None
    """CPUs per GPU (`--cpus-per-gpu`; needs gpus_per_task)."""
    gpus_per_task: int | None = None
    """GPUs per task (`--gpus-per-task`)."""
    mem_per_gpu: str | None = None
    """Memory per GPU (`--mem-per-gpu`, e.g. 80G)."""
    mem_per_cpu: str | None = None
    """Memory per CPU (`--mem-per-cpu`)."""
    signal_delay_s: int = 120
    """Seconds before the time limit at which submitit's signal (USR2, to the task) asks it to requeue itself."""
    additional_parameters: dict[str, Any] = field(default_factory=dict)
    """Any other sbatch option, e.g. {mail-type: END} (without the leading dashes)."""
    setup: list[str] | None = None
    """Shell lines run in the batch script before the task (e.g. module load ...)."""


@dataclass
class EvalConfig:
    """In-training evaluation (SkyRL) and the standalone evaluation stage."""

    interval: int = 5
    """Evaluate every N training steps (seed: 5)."""
    before_train: bool = True
    """Evaluate the base model at step 0 (ours: gives the ~61% starting point)."""
    responses_per_problem: int = 8
    """Responses per AIME problem; accuracy = their average (seed: 8)."""
    in_training: bool = True
    """Run SkyRL's own evaluation inside training; set false to evaluate only with chained evaluation jobs."""
    chain: bool = False
    """Submit one standalone evaluation job per HF export as it appears, from the training job (exactly once per
    checkpoint across requeues). Turns HF exports on at every checkpoint unless checkpoint.hf_save_interval is set."""
    chain_extra_args: list[str] = field(default_factory=list)
    """Extra `beam-slurm evaluate` arguments for chained evaluations, as keys (e.g. ["eval.limit=5"]); they come last
    and win."""
    chain_poll_s: float = 30.0
    """Seconds between two looks for new exports while training runs."""
    chain_settle_s: float = 60.0
    """An HF export counts as complete once none of its files changed for this long (SkyRL writes exports in place,
    without a marker); the last export of a finished run is taken at once."""
    limit: int | None = None
    """Standalone evaluation: only the first N problems of each file (smoke runs); empty = every problem."""
    dtype: str = "auto"
    """Standalone evaluation: weight dtype of the vLLM engine; auto = the checkpoint's (the CPU tests use float32)."""
    gpu_memory_utilization: float = 0.9
    """Standalone evaluation: fraction of accelerator memory vLLM takes (on vLLM's CPU build: of host memory, for
    the KV cache). Higher than rollout.gpu_memory_utilization because no trainer shares the GPUs."""
    enforce_eager: bool = False
    """Standalone evaluation: skip CUDA graph capture (faster start, slower decode; small tests)."""
    server_request_timeout_s: float = 1800.0
    """Standalone evaluation with `--server URL`: seconds one request (k responses of a problem) may take."""
    server_max_attempts: int = 4
    """Standalone evaluation with `--server URL`: tries per request; connection errors, time-outs, 429 and 5xx are
    retried, other errors are not."""
    server_concurrency: int = 8
    """Standalone evaluation with `--server URL`: requests in flight at once."""
    chunk_problems: int = 5
    """Standalone evaluation: problems generated per chunk; each chunk's responses are saved as it finishes, so a
    preempted or requeued task generates only what is missing (ours: 5, six chunks for AIME's 30 problems)."""
    hang_timeout_s: float | None = None
    """Standalone evaluation: the longest one chunk of generation may take before the task is taken for hung (an
    engine that stopped producing tokens): its stacks go to `<store>/hang/`, the saved chunks are kept and the task
    is requeued (at most eval.launcher.max_num_timeout times). Unset: 5 x the median chunk time, at least 600 s,
    plus trainer.expected_model_load_s before the first chunk; 0: off."""
    launcher: EvalLauncherConfig = field(default_factory=EvalLauncherConfig)
    """The evaluation job array's Slurm settings (Hydra submitit launcher keys)."""


@dataclass
class GradeConfig:
    """Grading of responses (`beam-slurm grade`, and in `evaluate`)."""

    timeout_s: float = 5.0
    """Seconds one response may take to grade; then its worker is interrupted (killed if it does not stop) and the
    response counts as wrong and in `timeouts`."""
    memory_mb: int = 2048
    """Address-space cap of each grading process in MiB (math-verify imports sympy: at least 256); a response that
    needs more counts as wrong."""
    workers: int = 0
    """Grading processes; 0 = one per CPU this process may use (the Slurm allocation, not the node)."""


@dataclass
class CheckpointConfig:
    """Saving and resuming."""

    interval: int = 10
    """Save every N steps (env CKPT_INTERVAL; seed: 10 for LoRA, 25 for full fine-tuning)."""
    hf_save_interval: int = -1
    """Write an HF export every N steps (-1 = never); the evaluation chain needs exports or LoRA adapters."""
    max_to_keep: int = -1
    """Checkpoints kept (-1 = all, seed). Each full checkpoint needs ~0.9 TB per node."""
    resume_mode: ResumeModeField = "none"
    """none | latest | from_path (env RESUME_MODE). A requeued attempt always resumes with latest."""
    resume_path: str | None = None
    """Checkpoint directory global_step_N for resume_mode=from_path (trainer.resume_path)."""
    gbytes_per_node: float | None = None
    """GB one training node writes per checkpoint, for the notice budget and the interval advice; empty = the
    estimate: the seed's ~7 TB full checkpoint over the training nodes, or for LoRA its adapters' share of it
    (`beam_slurm.policy.notice_budget`)."""


@dataclass
class TrainerConfig:
    """Which trainer runs and how."""

    backend: RecipeBackendField = "skyrl"
    """skyrl (the real run, GPUs) or rehearsal (checks the plumbing on any cluster; it does not train)."""
    python: str = "python"
    """Interpreter inside the container/allocation that runs the driver."""
    placement_colocated: bool = True
    """Training and generation share GPUs in turn (seed: LoRA and BF16); MXFP8 splits them."""
    rollout_nodes: int = 0
    """Nodes given to vLLM when not colocated (the rest train)."""
    logger: str = "console"
    """SkyRL metrics logger: console, wandb, mlflow, swanlab or tensorboard (ours: console works without network).
    wandb keeps one W&B run across requeues: its id is chosen at the first attempt and kept in the run record, every
    attempt logs into its own folder (see trainer.wandb_mode) and `beam-slurm sync RUN` uploads them in order."""
    wandb_mode: WandbModeField = "offline"
    """W&B mode for trainer.logger=wandb (WANDB_MODE): offline (ours: compute nodes often have no internet; upload
    afterwards with `beam-slurm sync RUN`), online, or disabled."""
    project_name: str = "beam"
    """The tracker's project (SkyRL's trainer.project_name; WANDB_PROJECT for the rehearsal)."""
    wandb_group: str = ""
    """W&B run group (WANDB_RUN_GROUP in the job); empty = none, or for a sweep's points the sweep's name."""
    tags: list[str] = field(default_factory=list)
    """Tags of the W&B run (SkyRL's trainer.tags; WANDB_TAGS for the rehearsal), at most 64 characters each."""
    extra_overrides: list[str] = field(default_factory=list)
    """Raw SkyRL key=value overrides appended last (they win); validated by SkyRL at launch."""
    extra_env: dict[str, str] = field(default_factory=dict)
    """Extra environment variables for the driver and every Ray worker on every node (exported on each node before
    Ray starts). No secrets here: a name containing TOKEN, KEY, SECRET, PASSWORD or CREDENTIAL is refused; use
    env_secret_files or export it where the job is submitted."""
    env_inherit: list[str] = field(
        default_factory=lambda: [
            "HF_HUB_OFFLINE",
            "TRANSFORMERS_OFFLINE",
            "HF_DATASETS_OFFLINE",
            "HF_HOME",
            "HF_HUB_CACHE",
            "HF_TOKEN",
            "HF_ENDPOINT",
            "WANDB_*",
            "MLFLOW_*",
            "NCCL_*",
            "TORCH_NCCL_*",
            "GLOO_SOCKET_IFNAME",
            "SKYRL_*",
            "VLLM_*",
            "CUDA_DEVICE_MAX_CONNECTIONS",
            "PYTORCH_CUDA_ALLOC_CONF",
            "TOKENIZERS_PARALLELISM",
            "HTTP_PROXY",
            "HTTPS_PROXY",
            "NO_PROXY",
            "http_proxy",
            "https_proxy",
            "no_proxy",
        ]
    )
    """Variables (names or PREFIX_* patterns) taken from the environment the job is submitted with and exported on
    every node before Ray starts, so the driver and every Ray worker see them: offline modes and caches of the
    hub, the tracker's settings, NCCL/gloo, the SkyRL timeouts (SKYRL_*), vLLM. Each node records what it exported
    in `<log_dir>/<jobid>-<attempt>/env/<node>.json`; secrets (HF_TOKEN, WANDB_API_KEY, ...) are inherited, never
    printed or written: logs and records show `<set>` (ours)."""
    env_secret_files: dict[str, str] = field(default_factory=dict)
    """Secrets passed by file: NAME -> absolute path of a file (readable only by you, on storage every node sees)
    whose content each node reads into NAME before Ray starts; the value is never on a command line or in a log."""
    expected_step_s: float = 600.0
    """Seconds one training step (generation + training) takes, for the notice budget and interval advice until the
    run has steps of its own in train_metrics.jsonl, which `plan` then measures (ours: an estimate per recipe)."""
    expected_bringup_s: float = 120.0
    """Seconds from the attempt's start to a Ray cluster ready for the driver (preflight, Ray on every node), for
    `plan`'s "one attempt" row until the goodput ledger measures it (ours: an estimate)."""
    expected_model_load_s: float = 600.0
    """Seconds the trainer takes to load the model and start its engines before the first step, for the same row
    (ours: an estimate for the seed's ~1 TB model; the rehearsal's is trainer.rehearsal_model_load_s)."""
    rehearsal_step_s: float = 2.0
    """Rehearsal trainer only (env BEAM_REHEARSAL_STEP_SECONDS): seconds one rehearsal step takes."""
    rehearsal_save_s: float = 0.0
    """Rehearsal trainer only: seconds one checkpoint save takes at least (the bytes are written over this time)."""
    rehearsal_save_bytes: int = 0
    """Rehearsal trainer only: bytes each save writes and fsyncs into the checkpoint folder, so the storage's speed
    counts (0 = a few small files)."""
    rehearsal_model_load_s: float = 0.0
    """Rehearsal trainer only: seconds spent "loading the model" before the first step of each attempt."""
    rehearsal_hang_at_step: int = 0
    """Rehearsal trainer only: in the job's first attempt, the GPU actor on the last node blocks for good in this
    step, as a rank stuck in a collective would (every process alive, no progress): the hang watchdog's test.
    0 never (ours)."""


@dataclass
class SiteConfig:
    """What `beam-slurm doctor` found on the cluster, kept in a site profile"""

    # Facts, never a job's setting; nothing here unless a profile (`cluster=NAME`) sets it.

    measured: list[str] = field(default_factory=list)
    """Keys of this profile whose value `doctor --probe` measured or derived from a measurement (`plan` marks them
    `measured`); a key given on the command line or by its variable is no longer measured."""
    measured_at: str = ""
    """When `doctor` examined the cluster (ISO 8601)."""
    slurm_version: str = ""
    """The Slurm version `doctor` found."""
    signal_early_s: float | None = None
    """Seconds `--signal` arrived before the lead asked for (Slurm may send it up to 60 s early), as measured."""
    requeue_hold_s: float | None = None
    """Seconds a requeued job waited before it could start again (the credential window), as configured or
    measured."""
    local_write_gbytes_per_s: float | None = None
    """Write speed of a node's local disk (GB/s), as measured."""
    queue_wait_s: float | None = None
    """Seconds the probe's first job waited in the queue, when `doctor --probe` ran."""


@dataclass
class BeamConfig:
    """The whole recipe: what `beam-slurm plan` prints and `sbatch sbatch/train_*.sh` runs."""

    recipe: str = "lora_32gpu"
    """Recipe name: lora_16gpu, lora_32gpu, bf16_64gpu or mxfp8_64gpu."""
    run_name: str | None = None
    """Run name (env RUN_NAME); empty = beam_<recipe>. Names ckpt/export folders and the Slurm job."""
    precision: PrecisionField = "bf16"
    """Training and rollout precision: bf16 or mxfp8 (sweepable)."""
    max_training_steps: int = 50
    """Training steps (env MAX_TRAINING_STEPS; seed: 50)."""
    seed: int = 42
    """Random seed (ours)."""
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    paths: PathsConfig = field(default_factory=PathsConfig)
    lora: LoraConfig = field(default_factory=LoraConfig)
    megatron: MegatronConfig = field(default_factory=MegatronConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    batch: BatchConfig = field(default_factory=BatchConfig)
    generation: GenerationConfig = field(default_factory=GenerationConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    container: ContainerSettings = field(default_factory=ContainerSettings)
    ray: RaySettings = field(default_factory=RaySettings)
    grade: GradeConfig = field(default_factory=GradeConfig)
    data: DataConfig = field(default_factory=DataConfig)
    site: SiteConfig = field(default_factory=SiteConfig)

    # Derived numbers; computed in one place so plan, validation and the SkyRL command agree.
    @property
    def total_gpus(self) -> int:
        return self.cluster.nodes * self.cluster.gpus_per_node

    @property
    def is_lora(self) -> bool:
        return self.lora.rank > 0

    @property
    def training_nodes(self) -> int:
        return (
            self.cluster.nodes if self.trainer.placement_colocated else self.cluster.nodes - self.trainer.rollout_nodes
        )

    @property
    def training_gpus(self) -> int:
        return self.training_nodes * self.cluster.gpus_per_node

    @property
    def rollout_gpus(self) -> int:
        colocated = self.trainer.placement_colocated
        return self.training_gpus if colocated else self.trainer.rollout_nodes * self.cluster.gpus_per_node

    @property
    def gpus_per_engine(self) -> int:
        return self.rollout.tensor_parallel * self.rollout.pipeline_parallel

    @property
    def num_engines(self) -> int:
        engines = self.rollout.num_engines
        return engines if engines is not None else max(self.rollout_gpus // self.gpus_per_engine, 0)

    @property
    def executor_backend(self) -> str:
        if self.rollout.executor_backend != "auto":
            return self.rollout.executor_backend
        return "mp" if self.gpus_per_engine <= self.cluster.gpus_per_node else "ray"

    @property
    def data_parallel(self) -> int:
        m = self.megatron
        model_parallel = m.tensor_parallel * m.pipeline_parallel * m.context_parallel
        return self.training_gpus // model_parallel if model_parallel else 0

    @property
    def mini_batch_prompts(self) -> int:
        return self.batch.prompts_per_step // self.batch.mini_batches if self.batch.mini_batches else 0

    @property
    def learning_rate(self) -> float:
        return self.algorithm.lr if self.algorithm.lr is not None else 1e-5 if self.is_lora else 1e-6
