"""Short measurements on this machine: a training step's rate (rates), the probe behind
`trainer plan --probe` (probe), and the search of `trainer tune` and `tune_threads` (tune)."""
