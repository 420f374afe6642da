"""Where a batch runs: `batch` (this machine) and `slurm_array` (a Slurm job array)."""
