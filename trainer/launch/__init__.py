"""Carrying out the plan on a host: one launcher per launch kind (trainer.launch.host
dispatches), supervised with trainer.supervision."""
