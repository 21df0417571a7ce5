"""What each distribution mode changes in a training process, behind one interface.

The planner decides; a Runtime carries out its part of the plan inside the process:
devices, strategy scope, optimizer wrapping, per-step agreement, evaluation aggregation.
"""
from __future__ import annotations

import importlib

from trainer import planner

RUNTIMES = {
    planner.SINGLE: "trainer.modes.base:Runtime",
    planner.TOWER: "trainer.modes.tower:TowerRuntime",
    planner.MIRRORED: "trainer.modes.tower:MirroredRuntime",
    planner.HOROVOD: "trainer.modes.horovod:HorovodRuntime",
    planner.MULTI_WORKER_MIRRORED: "trainer.modes.collective:MultiWorkerMirroredRuntime",
    planner.PARAMETER_SERVER: "trainer.modes.parameter_server:ParameterServerRuntime",
}


def runtime_for(plan, process, hyperparameters):
    module_name, class_name = RUNTIMES[plan.mode].split(":")
    return getattr(importlib.import_module(module_name), class_name)(plan, process, hyperparameters)
