"""tools/launch/: the local, SLURM and Kubernetes recipes parse, and every override they pass composes into
the config with the multi-process settings each process needs."""

import os
import pathlib
import re
import shlex
import subprocess

import pytest
import yaml

LAUNCH = pathlib.Path(__file__).parents[2] / "tools" / "launch"


def overrides_after_train_py(argv: list[str]) -> list[str]:
    return argv[[i for i, a in enumerate(argv) if a.endswith("train.py")][0] + 1 :]


def dry_run(script: str, *args: str, env: dict | None = None) -> list[list[str]]:
    proc = subprocess.run(
        ["bash", str(LAUNCH / script), *args],
        env={**os.environ, "DRY_RUN": "1", **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return [shlex.split(line) for line in proc.stdout.splitlines() if line.strip()]


@pytest.mark.parametrize("script", ["local.sh", "slurm.sbatch"])
def test_the_shell_recipes_parse(script):
    proc = subprocess.run(["bash", "-n", str(LAUNCH / script)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


def test_local_sh_gives_each_of_n_processes_its_id_and_a_share_of_8_cpu_devices(compose_config):
    commands = dry_run("local.sh", "4", "experiment=demo", "loop.steps=1", env={"PORT": "31337"})
    assert len(commands) == 4
    for i, argv in enumerate(commands):
        config = compose_config(overrides_after_train_py(argv))
        d = config.mesh.distributed
        assert (d.enabled, d.coordinator_address, d.num_processes, d.process_id, d.cpu_devices) == (
            True,
            "127.0.0.1:31337",
            4,
            i,
            2,
        )
        assert config.loop.steps == 1 and config.rollout.experiment == "demo"


def test_local_sh_names_a_bad_process_count():
    proc = subprocess.run(
        ["bash", str(LAUNCH / "local.sh"), "two"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2 and "a positive int; got 'two'" in proc.stderr


def test_the_slurm_script_runs_one_task_per_host_on_the_two_host_preset(compose_config):
    (argv,) = dry_run("slurm.sbatch", "loop.steps=3")
    assert argv[:3] == ["srun", "--ntasks-per-node=1", "--kill-on-bad-exit=1"]
    config = compose_config(overrides_after_train_py(argv))
    assert config.mesh.distributed.enabled and config.loop.steps == 3
    # Left to jax.distributed's SLURM detection: nothing here may pin them.
    d = config.mesh.distributed
    assert (d.coordinator_address, d.num_processes, d.process_id) == (None, None, None)
    sbatch = dict(re.findall(r"^#SBATCH --([\w-]+)=(\S+)", (LAUNCH / "slurm.sbatch").read_text(), re.M))
    mesh = config.mesh
    assert mesh.data * mesh.fsdp * mesh.tensor * mesh.expert == int(sbatch["nodes"]) * int(
        sbatch["gpus-per-node"]
    )


def test_the_kubernetes_job_gives_each_indexed_pod_its_process_id_and_pod_0s_address(compose_config):
    service, job = yaml.safe_load_all((LAUNCH / "kubernetes.yaml").read_text())
    assert (service["kind"], job["kind"]) == ("Service", "Job")
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["selector"] == {
        "job-name": "legorl-train"
    }
    spec = job["spec"]
    assert spec["completionMode"] == "Indexed" and spec["completions"] == spec["parallelism"]
    pod = spec["template"]["spec"]
    assert pod["subdomain"] == service["metadata"]["name"] and pod["restartPolicy"] == "Never"
    (container,) = pod["containers"]
    env = {e["name"]: e for e in container["env"]}
    assert "job-completion-index" in env["JOB_COMPLETION_INDEX"]["valueFrom"]["fieldRef"]["fieldPath"]
    for index in range(spec["completions"]):
        args = [a.replace("$(JOB_COMPLETION_INDEX)", str(index)) for a in container["args"]]
        config = compose_config(args)
        d = config.mesh.distributed
        assert d.enabled and d.process_id == index and d.num_processes == spec["completions"]
        host, port = d.coordinator_address.rsplit(":", 1)
        assert host == f"{job['metadata']['name']}-0.{service['metadata']['name']}"
        assert int(port) in [p["port"] for p in service["spec"]["ports"]]
        mesh = config.mesh
        gpus = int(container["resources"]["limits"]["nvidia.com/gpu"])
        assert mesh.data * mesh.fsdp * mesh.tensor * mesh.expert == spec["completions"] * gpus
