"""A framework module of an image built the SageMaker training toolkit's way
(SAGEMAKER_TRAINING_MODULE=toolkit_framework:main): the toolkit's own runner starts the
job's entry point, under the toolkit's MPI runner when the SDK's MPI key is on."""
from sagemaker_training import entry_point, environment, runner


def main():
    env = environment.Environment()
    mpi = str(env.additional_framework_parameters.get("sagemaker_mpi_enabled", "false")).lower() == "true"
    entry_point.run(uri=env.module_dir, user_entry_point=env.user_entry_point, args=env.to_cmd_args(),
                    env_vars=env.to_env_vars(), runner_type=runner.MPIRunnerType if mpi else runner.ProcessRunnerType)
