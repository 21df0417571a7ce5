"""Carrying out the plan on a host: one launcher per launch kind (trainer.launch.host
dispatches), the processes it supervises, and the peer hosts it waits for and follows."""
