"""Container runtimes (pyxis/enroot, Apptainer, none): settings, command rendering, and the image pull stage.

- settings.py:    ContainerSettings (the `container:` config node), Mount
- runtime.py:     srun_container_args / command_prefix / container_environment / validate / resolved_image
- pull.py:        `beam-slurm pull-container` and pull_image / image_is_current
(the lock on shared storage that the pull stage takes is beam_slurm.core.shared_lock)
"""
