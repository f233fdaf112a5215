"""The recipe's settings that take one of a fixed set of values, each set spelled once as a Literal; the runtime tuples
that validation checks against are derived from these (`typing.get_args`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

Precision = Literal["bf16", "mxfp8"]
RecipeBackend = Literal["skyrl", "rehearsal"]
KvCacheDtype = Literal["auto", "bf16", "fp8", "fp8_e4m3", "fp8_e5m2"]
Attention = Literal["fa4", "fa2"]
ExecutorBackend = Literal["auto", "ray", "mp"]
ResumeMode = Literal["none", "latest", "from_path"]
WandbMode = Literal["offline", "online", "disabled"]
Quantization = Literal["mxfp8", "fp8"]
ContainerRuntime = Literal["none", "pyxis", "apptainer"]
RootFilesystem = Literal["default", "writable", "readonly"]

if TYPE_CHECKING:
    PrecisionField = Precision
    RecipeBackendField = RecipeBackend
    KvCacheDtypeField = KvCacheDtype
    AttentionField = Attention
    ExecutorBackendField = ExecutorBackend
    ResumeModeField = ResumeMode
    WandbModeField = WandbMode
    QuantizationField = Quantization
    ContainerRuntimeField = ContainerRuntime
    RootFilesystemField = RootFilesystem
else:
    # OmegaConf types fields from annotations and knows no Literal; validation.py checks the choice
    PrecisionField = RecipeBackendField = KvCacheDtypeField = AttentionField = ExecutorBackendField = str
    ResumeModeField = WandbModeField = QuantizationField = ContainerRuntimeField = RootFilesystemField = str
