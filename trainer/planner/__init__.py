"""From the job to a plan (trainer.planner.planner): the mode, every process's place, data and
command; a data group's hosts, a stage of its own (data_groups)."""
