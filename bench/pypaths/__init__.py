"""The parts of bench/python_paths.py, which keeps the command line: what a run measures
(columns), each rank's calls (rank_calls) and processes (ranks), DeepSpeed as a peer
(deepspeed_peer), the timing of one row (timing), and the report (report, machine).
"""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The package from this source tree (it finds the library through COLLOPS_BUILD_DIR), unless one
# is installed.
sys.path.append(os.path.join(ROOT, "python"))
