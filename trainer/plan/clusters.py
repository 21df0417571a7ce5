"""TF_CONFIG clusters: SageMaker's layout (as AWS's TensorFlow toolkit builds it) and the
TF 2 strategies' (master -> chief, a worker task beside every PS)."""
from __future__ import annotations

# SageMaker's ports (as AWS's TensorFlow toolkit uses them): master/worker 2222, PS 2223,
# multi-worker mirrored 8890. TF 2's PS coordinator does no computation, so the first host
# also runs a worker, on its own port.
MASTER_PORT, PS_PORT, PS_WORKER_PORT, MWMS_PORT = 2222, 2223, 2224, 8890


def translate_master(tf_config: dict) -> dict:
    """SageMaker's TF_CONFIG says `master`; TF 2's strategies want `chief` (see P15 in docs/pitfalls.md)."""
    cluster = {("chief" if job == "master" else job): addresses
               for job, addresses in tf_config["cluster"].items()}
    result = {**tf_config, "cluster": cluster}
    if "task" in tf_config and tf_config["task"]["type"] == "master":
        result["task"] = {**tf_config["task"], "type": "chief"}
    return result


def sagemaker_ps_cluster(hosts) -> dict:
    """The PS cluster as AWS's TensorFlow toolkit builds it for several hosts."""
    cluster = {"master": [f"{hosts[0]}:{MASTER_PORT}"], "ps": [f"{h}:{PS_PORT}" for h in hosts]}
    if len(hosts) > 1:
        cluster["worker"] = [f"{h}:{MASTER_PORT}" for h in hosts[1:]]
    return cluster


def ps_cluster(hosts) -> dict:
    """TF 2 PS cluster: SageMaker's layout with master -> chief (the coordinator), and a
    worker on every host, so each host has one PS and one worker (see P13 in docs/pitfalls.md)."""
    cluster = translate_master({"cluster": sagemaker_ps_cluster(hosts)})["cluster"]
    cluster["worker"] = [f"{h}:{PS_WORKER_PORT}" for h in hosts]
    return cluster


# TF_CONFIG for a training script, exactly as AWS's TF 2 container writes it (its toolkit,
# sagemaker-tensorflow-training 20.x: _build_tf_config_for_ps / _for_mwms), so a script
# written for that container reads what it expects. Written out here rather than imported:
# that module imports TensorFlow at its top and pins sagemaker-training <= 4.8.3 and
# numpy < 1.24, which this image's stack is past; a unit test holds the two to the same table.
def aws_ps_tf_config(hosts, current_host: str, ps_task: bool = False) -> dict:
    hosts = list(hosts)
    # On one host AWS's toolkit names no PS tasks (and runs none).
    cluster = sagemaker_ps_cluster(hosts) if len(hosts) > 1 else {"master": [f"{hosts[0]}:{MASTER_PORT}"]}
    if ps_task:
        task = {"index": hosts.index(current_host), "type": "ps"}
    elif current_host == hosts[0]:
        task = {"index": 0, "type": "master"}
    else:
        task = {"index": hosts[1:].index(current_host), "type": "worker"}
    return {"cluster": cluster, "environment": "cloud", "task": task}


def aws_mwms_tf_config(hosts, current_host: str) -> dict:
    return {"cluster": {"worker": [f"{h}:{MWMS_PORT}" for h in hosts]}, "environment": "cloud",
            "task": {"index": list(hosts).index(current_host), "type": "worker"}}


def mwms_cluster(hosts) -> dict:
    return translate_master({"cluster": {"master": [f"{hosts[0]}:{MWMS_PORT}"],
                                         **({"worker": [f"{h}:{MWMS_PORT}" for h in hosts[1:]]}
                                            if len(hosts) > 1 else {})}})["cluster"]
