"""A user's own training script, run as AWS's TensorFlow container runs it, and better.

- `launch.py`: a host's side: install its code (requirements.txt under the image's pins),
  start its process (and PS task), supervise it, and end it with the job's other hosts;
- `process.py`: one process of the script: its command line and environment (what AWS's
  container gives it, and what only this one does), and a rank under mpirun;
- `stall.py`: the script's progress, watched without changing it: a stalled rank ends
  the job, named, within `stall_timeout_sec`;
- `stacks.py`: every rank's Python stack (py-spy), below the reason when a script stalls,
  fails or is stopped.

The helpers a script imports are `trainer.kit`.
"""
