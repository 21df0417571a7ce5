"""Which network interface the job's hosts talk over (trainer.contract.network), and what the
plan does where none works."""
import dataclasses

import pytest

from trainer.contract.network import choose_interface, present_interfaces
from trainer.errors import JobError
from trainer.planner.planner import make_plan, refuse_an_unusable_interface
from test_planner import job

ETH0 = {"eth0": ("172.18.0.2",)}
TWO = {"eth0": ("172.18.0.2",), "eth1": ("10.1.0.5",)}

# named, this host's interfaces, the address its name resolves to -> (chosen, usable, said)
CASES = {
    "the named one exists (SageMaker's ethwe)": ("ethwe", {"ethwe": ("10.0.0.2",), **ETH0}, None,
                                                 ("ethwe", True, "")),
    "interfaces not looked at: the named one": ("eth0", {}, None, ("eth0", True, "")),
    "ethwe named, eth0 holds the host's address (ModelTrainer's local mode)": (
        "ethwe", TWO, "172.18.0.2", ("eth0", True, "using eth0, which holds algo-1's address 172.18.0.2")),
    "ethwe named, the address on the second of two": (
        "ethwe", TWO, "10.1.0.5", ("eth1", True, "using eth1, which holds algo-1's address 10.1.0.5")),
    "ethwe named, one host: its only interface with an address": (
        "ethwe", {**ETH0, "tunl0": ()}, None, ("eth0", True, "using eth0, its only one with an address")),
    "ethwe named, two others, the name resolves elsewhere": (
        "ethwe", TWO, "192.0.2.9", ("ethwe", False, "(it has eth0 (172.18.0.2), eth1 (10.1.0.5)), and none of "
                                                     "them holds the address its name resolves to (192.0.2.9)")),
    "ethwe named, two others, the name does not resolve": (
        "ethwe", TWO, None, ("ethwe", False, "(it does not resolve)")),
}


@pytest.mark.parametrize("name", CASES)
def test_the_interface_the_hosts_talk_over(name):
    named, present, own_address, (chosen, usable, said) = CASES[name]
    choice = choose_interface(named, present, own_address, "algo-1")
    assert (choice.name, choice.usable) == (chosen, usable)
    assert said in choice.why
    if chosen != named or not usable:  # the reason names what was asked and where
        assert f"names the network interface {named}, which host algo-1 does not have" in choice.why


def test_this_machine_s_interfaces_have_their_addresses():
    interfaces = present_interfaces()
    assert "lo" not in interfaces
    assert all(isinstance(addresses, tuple) for addresses in interfaces.values())


MPI_2 = {"sagemaker_mpi_enabled": True, "sagemaker_mpi_num_of_processes_per_host": 2}


def on(the_job, named, present, own_address=None):
    return dataclasses.replace(the_job, network_interface=named, interfaces=present, own_address=own_address)


def test_the_plan_uses_and_says_the_interface_that_reaches_the_hosts():
    plan = make_plan(on(job(hosts=2, sdk=MPI_2), "ethwe", TWO, "172.18.0.2"))
    assert plan.network_interface == "eth0" and "using eth0" in plan.network_interface_why


def test_mpi_across_hosts_with_no_usable_interface_ends_the_job_naming_it():
    plan = make_plan(on(job(hosts=2, sdk=MPI_2), "ethwe", TWO, None))  # `trainer plan` shows it
    assert not plan.network_interface_usable and "none of them holds" in plan.network_interface_why
    with pytest.raises(JobError, match=r"^resourceconfig.json names the network interface ethwe, which host algo-1 "
                                       r"does not have .*; horovod runs MPI between the job's hosts over it"):
        refuse_an_unusable_interface(plan)  # on the job's host, before anything starts


@pytest.mark.parametrize("the_job", [job(hosts=2, hp={"distribution": "parameter_server"}), job(sdk=MPI_2)],
                         ids=["parameter servers: no MPI", "MPI on one host"])
def test_a_plan_without_mpi_across_hosts_goes_on_with_the_named_one(the_job):
    plan = make_plan(on(the_job, "ethwe", TWO, None))
    assert plan.network_interface == "ethwe" and "none of them holds" in plan.network_interface_why
    refuse_an_unusable_interface(plan)  # nothing to refuse
