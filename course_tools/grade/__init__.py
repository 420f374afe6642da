"""`course grade`, in three layers, each importing only the ones below it:

- `jail/`: the sandbox every process that touches a submission runs in, and the limits the
  operating system enforces on it. It knows nothing of notebooks or grades.
- `core/`: one submission from notebook to saved grade (the roster, the notebook run in the jail,
  the probe, the check process and its hidden checks, tamper detection, reports and gradebooks).
- `routes/`: how a batch is spread out: `batch` here, `slurm_array` as a Slurm job array.

`command` is the `course grade` command line on top.
"""
