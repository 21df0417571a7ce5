"""Running a job on this machine as SageMaker would: the folder, the Pipe-mode FIFOs, the hosts."""
