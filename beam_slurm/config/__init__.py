"""The recipe's typed configuration: schema, loading from conf/, validation."""

from beam_slurm.config.errors import ConfigError, ConfigProblem
from beam_slurm.config.load import load_config, to_yaml

__all__ = ["ConfigError", "ConfigProblem", "load_config", "to_yaml"]
