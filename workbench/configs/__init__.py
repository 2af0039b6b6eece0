"""Config export, import and lint: DeepSpeed ``ds_config.json``, Megatron-LM and Megatron-DeepSpeed command lines,
launch scripts (DeepSpeed launcher + hostfile, torchrun, SLURM)."""
from workbench.configs.deepspeed import DeepSpeedOptions, build_ds_config, validate_ds_config
from workbench.configs.hybrid import hybrid_args, hybrid_command, hybrid_ds_config, validate_hybrid
from workbench.configs.importer import Imported, import_any, import_ds_config, import_megatron_args
from workbench.configs.launch import deepspeed_launch_script, hostfile, slurm_script, torchrun_script
from workbench.configs.lint import LintFinding, lint_ds_config
from workbench.configs.megatron import megatron_args, megatron_command, validate_megatron_args

__all__ = [
    "DeepSpeedOptions", "build_ds_config", "validate_ds_config",
    "megatron_args", "megatron_command", "validate_megatron_args",
    "hybrid_ds_config", "hybrid_args", "hybrid_command", "validate_hybrid",
    "hostfile", "deepspeed_launch_script", "torchrun_script", "slurm_script",
    "Imported", "import_ds_config", "import_megatron_args", "import_any",
    "LintFinding", "lint_ds_config",
]
