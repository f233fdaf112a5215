"""Container runtimes (pyxis/enroot, Apptainer, none): settings, command rendering, and the image pull stage."""
