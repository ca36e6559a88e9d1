"""Launcher detection: each launcher emulated by its environment variables."""

from __future__ import annotations

import os

import pytest

from meshcast.errors import RendezvousError
from meshcast.rendezvous import LaunchEnv, detect_launch_env, launch_env, parse_tasks_per_node

LAUNCHER_PREFIXES = ("OMPI_", "PMI_", "PMIX_", "PALS_", "SLURM_", "I_MPI_", "MPI_LOCAL",
                     "TORCHELASTIC_", "MESHCAST_")
SPAWNER_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                "NODE_RANK", "MASTER_ADDR", "MASTER_PORT")


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    """Start every test with no launcher variables at all."""
    for name in list(os.environ):
        if name.startswith(LAUNCHER_PREFIXES) or name in SPAWNER_VARS:
            monkeypatch.delenv(name)
    return monkeypatch


def setenv(monkeypatch, **variables: object) -> None:
    for name, value in variables.items():
        monkeypatch.setenv(name, str(value))


def test_no_launcher_is_a_lone_process():
    env = detect_launch_env()
    assert env == LaunchEnv("none", 0, 1, 0, 1, None, None, None, None)
    assert env.single_node is True


def test_meshcast_run(clean_env):
    setenv(clean_env, RANK=5, WORLD_SIZE=8, LOCAL_RANK=1, LOCAL_WORLD_SIZE=4, GROUP_RANK=1,
           MASTER_ADDR="10.0.0.1", MASTER_PORT=29500, MESHCAST_RUN_ID="job42")
    env = detect_launch_env()
    assert env == LaunchEnv("meshcast", 5, 8, 1, 4, 1, "10.0.0.1", 29500, "job42")
    assert env.single_node is False


def test_torchrun(clean_env):
    setenv(clean_env, RANK=3, WORLD_SIZE=4, LOCAL_RANK=3, LOCAL_WORLD_SIZE=4, GROUP_RANK=0,
           MASTER_ADDR="127.0.0.1", MASTER_PORT=29400, TORCHELASTIC_RUN_ID="abc",
           TORCHELASTIC_RESTART_COUNT=0, TORCHELASTIC_USE_AGENT_STORE="True")
    env = launch_env()
    assert env == LaunchEnv("torchrun", 3, 4, 3, 4, 0, "127.0.0.1", 29400, "abc")
    assert env.single_node is True


def test_manual_partial(clean_env):
    setenv(clean_env, RANK=1)
    env = detect_launch_env()
    assert (env.launcher, env.rank, env.world_size, env.local_rank) == ("manual", 1, None, None)
    assert env.single_node is None


def test_open_mpi(clean_env):
    setenv(clean_env, OMPI_COMM_WORLD_RANK=2, OMPI_COMM_WORLD_SIZE=4,
           OMPI_COMM_WORLD_LOCAL_RANK=0, OMPI_COMM_WORLD_LOCAL_SIZE=2,
           OMPI_COMM_WORLD_NODE_RANK=0, PMIX_NAMESPACE="prterun-host-1234@1")
    env = detect_launch_env()
    # OMPI_COMM_WORLD_NODE_RANK is not a node index: node_rank stays unknown.
    assert env == LaunchEnv("openmpi", 2, 4, 0, 2, None, None, None, "prterun-host-1234@1")


def test_mpich_hydra(clean_env):
    setenv(clean_env, PMI_RANK=1, PMI_SIZE=3, PMI_FD=7, MPI_LOCALRANKID=1, MPI_LOCALNRANKS=3)
    assert detect_launch_env() == LaunchEnv("mpich", 1, 3, 1, 3, None, None, None, None)


def test_intel_mpi(clean_env):
    setenv(clean_env, PMI_RANK=0, PMI_SIZE=2, MPI_LOCALRANKID=0, MPI_LOCALNRANKS=2,
           I_MPI_ROOT="/opt/intel/mpi")
    assert detect_launch_env().launcher == "intelmpi"


def test_cray_pals(clean_env):
    setenv(clean_env, PALS_RANKID=5, PALS_LOCAL_RANKID=1, PALS_NODEID=2, PMI_RANK=5,
           PMI_SIZE=8, PMI_LOCAL_SIZE=2, PMI_LOCAL_RANK=1, PALS_APID="apid-9")
    assert detect_launch_env() == LaunchEnv("cray-pals", 5, 8, 1, 2, 2, None, None, "apid-9")


def test_slurm_srun(clean_env):
    setenv(clean_env, SLURM_PROCID=7, SLURM_NTASKS=7, SLURM_STEP_NUM_TASKS=8, SLURM_LOCALID=1,
           SLURM_NODEID=3, SLURM_STEP_NUM_NODES=4, SLURM_STEP_TASKS_PER_NODE="2(x3),2",
           SLURM_JOB_ID=1234, SLURM_STEP_ID=0)
    # SLURM_STEP_NUM_TASKS (the step's count) is preferred over SLURM_NTASKS.
    assert detect_launch_env() == LaunchEnv("slurm", 7, 8, 1, 2, 3, None, None, "1234.0")


def test_slurm_uneven_nodes_local_world_size(clean_env):
    setenv(clean_env, SLURM_PROCID=6, SLURM_NTASKS=7, SLURM_LOCALID=0, SLURM_NODEID=3,
           SLURM_STEP_NUM_NODES=4, SLURM_STEP_TASKS_PER_NODE="2(x3),1", SLURM_STEP_ID=1)
    env = detect_launch_env()
    assert (env.world_size, env.local_world_size, env.node_rank) == (7, 1, 3)


def test_slurm_batch_script_is_not_a_launcher(clean_env):
    # Inside `sbatch --ntasks=4` without srun: SLURM_PROCID=0 is not rank 0 of 4.
    setenv(clean_env, SLURM_PROCID=0, SLURM_NTASKS=4, SLURM_JOB_ID=1, SLURM_NODEID=0)
    assert detect_launch_env().launcher == "none"
    setenv(clean_env, SLURM_STEP_ID="batch")
    assert detect_launch_env().launcher == "none"


@pytest.mark.parametrize("text,expected", [
    ("4", [4]),
    ("2(x3),1", [2, 2, 2, 1]),
    ("1,2(x2),3", [1, 2, 2, 3]),
    ("16(x1)", [16]),
])
def test_parse_tasks_per_node(text, expected):
    assert parse_tasks_per_node(text) == expected


@pytest.mark.parametrize("text", ["", "2(3)", "x", "2(x3", "-1"])
def test_parse_tasks_per_node_rejects_garbage(text):
    with pytest.raises(RendezvousError, match="tasks per node"):
        parse_tasks_per_node(text)


def test_slurm_nodes_mismatch_is_reported(clean_env):
    setenv(clean_env, SLURM_PROCID=0, SLURM_NTASKS=4, SLURM_NODEID=0, SLURM_STEP_ID=0,
           SLURM_STEP_NUM_NODES=3, SLURM_STEP_TASKS_PER_NODE="2(x2)")
    with pytest.raises(RendezvousError, match="SLURM_STEP_NUM_NODES=3"):
        detect_launch_env()


# -- precedence and disagreement -----------------------------------------------------


def test_torchrun_under_srun_uses_torchrun(clean_env):
    # srun starts one torchrun per node; its SLURM_PROCID is the node, not the worker.
    setenv(clean_env, SLURM_PROCID=1, SLURM_NTASKS=2, SLURM_STEP_ID=0, SLURM_NODEID=1,
           RANK=6, WORLD_SIZE=8, LOCAL_RANK=2, LOCAL_WORLD_SIZE=4, GROUP_RANK=1,
           TORCHELASTIC_RUN_ID="r")
    env = detect_launch_env()
    assert (env.launcher, env.rank, env.world_size) == ("torchrun", 6, 8)


def test_mpirun_inside_slurm_allocation_ignores_daemon_step(clean_env):
    # mpirun started its daemons with srun (2 nodes); ranks inherit the daemon's SLURM_*.
    setenv(clean_env, OMPI_COMM_WORLD_RANK=5, OMPI_COMM_WORLD_SIZE=8,
           OMPI_COMM_WORLD_LOCAL_RANK=1, OMPI_COMM_WORLD_LOCAL_SIZE=4,
           SLURM_PROCID=1, SLURM_NTASKS=2, SLURM_STEP_ID=0, SLURM_NODEID=1)
    env = detect_launch_env()
    assert (env.launcher, env.rank, env.world_size, env.node_rank) == ("openmpi", 5, 8, None)


def test_srun_with_cray_pmi_agrees_and_fills_node(clean_env):
    setenv(clean_env, PALS_RANKID=3, PMI_SIZE=4, PALS_LOCAL_RANKID=1, PMI_LOCAL_SIZE=2,
           SLURM_PROCID=3, SLURM_NTASKS=4, SLURM_STEP_ID=0, SLURM_NODEID=1,
           SLURM_STEP_TASKS_PER_NODE="2(x2)", SLURM_STEP_NUM_NODES=2, SLURM_JOB_ID=77)
    env = detect_launch_env()
    assert (env.launcher, env.rank, env.node_rank, env.run_id) == ("cray-pals", 3, 1, "77.0")


def test_mpi_sources_disagreeing_on_rank_raise_naming_both(clean_env):
    setenv(clean_env, OMPI_COMM_WORLD_RANK=0, OMPI_COMM_WORLD_SIZE=4, PMI_RANK=1, PMI_SIZE=4)
    with pytest.raises(RendezvousError, match=r"OMPI_COMM_WORLD_RANK=0.*PMI_RANK=1"):
        detect_launch_env()


def test_pals_and_pmi_disagreeing_raise(clean_env):
    setenv(clean_env, PALS_RANKID=2, PMI_RANK=3, PMI_SIZE=4)
    with pytest.raises(RendezvousError, match=r"PALS_RANKID=2.*PMI_RANK=3"):
        detect_launch_env()


def test_mpi_and_srun_same_size_disagreeing_on_rank_raise(clean_env):
    setenv(clean_env, PMI_RANK=1, PMI_SIZE=4, SLURM_PROCID=2, SLURM_NTASKS=4, SLURM_STEP_ID=0)
    with pytest.raises(RendezvousError, match=r"PMI_RANK=1 \(mpich\).*SLURM_PROCID=2 \(slurm\)"):
        detect_launch_env()


def test_mpi_sources_disagreeing_on_world_size_raise(clean_env):
    setenv(clean_env, OMPI_COMM_WORLD_RANK=1, OMPI_COMM_WORLD_SIZE=4, PMI_RANK=1, PMI_SIZE=2)
    with pytest.raises(RendezvousError, match=r"world size.*OMPI_COMM_WORLD_SIZE=4.*PMI_SIZE=2"):
        detect_launch_env()


# -- malformed values ----------------------------------------------------------------


@pytest.mark.parametrize("variables,match", [
    ({"RANK": "abc", "WORLD_SIZE": "2"}, "RANK='abc' is not an integer"),
    ({"RANK": "-1", "WORLD_SIZE": "2"}, "RANK='-1' is negative"),
    ({"RANK": "2", "WORLD_SIZE": "2"}, "RANK=2 is not below WORLD_SIZE=2"),
    ({"RANK": "0", "WORLD_SIZE": "0"}, "WORLD_SIZE=0"),
    ({"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "x"}, "OMPI_COMM_WORLD_SIZE='x'"),
    ({"RANK": "0", "WORLD_SIZE": "1", "MASTER_PORT": "70000"}, "MASTER_PORT=70000"),
])
def test_malformed_variables_are_named(clean_env, variables, match):
    setenv(clean_env, **variables)
    with pytest.raises(RendezvousError, match=match):
        detect_launch_env()


def test_launch_env_is_frozen():
    env = detect_launch_env()
    with pytest.raises(AttributeError):
        env.rank = 3  # type: ignore[misc]


def test_node_local_rank_from_any_launcher(clean_env):
    import meshcast

    assert meshcast.get_node_local_rank(fallback_rank=5) == 5  # no launcher
    with pytest.raises(RuntimeError, match="fallback_rank"):
        meshcast.get_node_local_rank()
    setenv(clean_env, PMI_RANK=1, PMI_SIZE=3, PMI_FD=7, MPI_LOCALRANKID=2, MPI_LOCALNRANKS=3)
    assert meshcast.get_node_local_rank() == 2  # MPICH's mpiexec
    setenv(clean_env, LOCAL_RANK=1)  # torch's variable first, as torch reads it
    assert meshcast.get_node_local_rank(fallback_rank=5) == 1
