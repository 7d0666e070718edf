"""What one run of bench/python_paths.py measures: the paths (its columns), the ops, the dtypes
and the two ways every call is timed.
"""

PATHS = [
    "engine",
    "execute",
    "execute_torch",
    "execute_out",
    "ops",
    "ops_",
    "dist",
    "noop",
    "gloo",
    "deepspeed",
    "ds_kernel",
]
OPS = ["allreduce", "allgather"]
DTYPES = ["float32", "bfloat16"]
MODES = ["sync", "loop"]
DS_PATHS = ("deepspeed", "ds_kernel")
