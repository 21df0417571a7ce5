"""What a plan is made of and the rules the modes build theirs with: its types, the layout of
channels over processes, the SDK's keys, MPI's command, TF_CONFIG's clusters, what an exchange
between hosts costs, and which mode `auto` picks from what the modes declare (auto). The
planner that puts them together is trainer.planner."""
