"""A worker without TensorFlow, for fast tests of course_utils.cluster.

It prints its task and pid, then does what its flags say: sleep, fail, crash (SIGSEGV), hang (all
tasks, or those of one job, as parameter servers do), start a child process (which must die with its
process group) or ignore SIGTERM (so stop() has to use SIGKILL).
"""

import argparse
import ctypes
import json
import os
import signal
import subprocess
import sys
import time

parser = argparse.ArgumentParser()
parser.add_argument("--sleep", type=float, default=0.0, help="seconds to work before exiting 0")
parser.add_argument("--fail", default="", help="task that exits with code 3, e.g. 'worker 1'")
parser.add_argument("--fail-after", type=float, default=0.0, help="seconds before that task fails")
parser.add_argument(
    "--message", default="ValueError: this worker fails on purpose", help="last line before failing"
)
parser.add_argument("--hang", action="store_true", help="never exit")
parser.add_argument("--crash", default="", help="task that dies of SIGSEGV, e.g. 'worker 1'")
parser.add_argument(
    "--hang-job", action="append", default=[], help="tasks of this job never exit, e.g. 'ps'"
)
parser.add_argument("--child", action="store_true", help="start a long-sleeping child process")
parser.add_argument("--ignore-term", action="store_true", help="ignore SIGTERM")
args = parser.parse_args()

config = json.loads(os.environ["TF_CONFIG"])
task = f"{config['task']['type']} {config['task']['index']}"
if args.ignore_term:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
print(f"task {task} pid {os.getpid()} pgid {os.getpgid(0)}")
print(f"COURSE_DEVICES={os.environ.get('COURSE_DEVICES')} cluster={json.dumps(config['cluster'])}")
if args.child:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    print(f"child pid {child.pid}")
print("ready")
if task == args.crash:
    ctypes.string_at(0)  # reads address 0: SIGSEGV, as a crash inside TensorFlow's C++ would
if task == args.fail:
    time.sleep(args.fail_after)
    print(f"Traceback (most recent call last):\n{args.message}")
    sys.exit(3)
while args.hang or config["task"]["type"] in args.hang_job:
    time.sleep(1)
time.sleep(args.sleep)
print("done")
