"""Watching what a host runs: its child processes, their stalls and ends (supervise), and the
peer hosts it waits for and follows (peers). The launchers of trainer.launch and of a user's
script (trainer.script) share them."""
