"""From the job to a plan: which mode runs, and every process's place, data and command (trainer.plan.planner)."""
