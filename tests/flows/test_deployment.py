"""prefect.yaml deploys against a real Prefect API (the test harness's server)."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PREFECT = str(Path(sys.executable).with_name("prefect"))


def _prefect(*args, env):
    return subprocess.run(
        [PREFECT, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )


def test_prefect_yaml_deploys_release_eval_with_schedule():
    from prefect.settings import PREFECT_API_URL

    env = {
        **os.environ,
        "PREFECT_API_URL": PREFECT_API_URL.value(),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    }
    pool = _prefect("work-pool", "create", "eval-pool", "--type", "process", env=env)
    assert pool.returncode == 0 or "already exists" in pool.stdout + pool.stderr, pool.stderr
    dep = _prefect("--no-prompt", "deploy", "--all", env=env)
    assert dep.returncode == 0, dep.stdout + dep.stderr
    assert "release-eval" in dep.stdout
    inspect = _prefect(
        "deployment", "inspect", "EvalSuite/release-eval", "--output", "json", env=env
    )
    assert inspect.returncode == 0, inspect.stderr
    doc = json.loads(inspect.stdout)
    assert doc["work_pool_name"] == "eval-pool"
    assert doc["parameters"]["release"] == "nightly"
    assert doc["parameters"]["manifest"] == "zoo/zoo.yaml"
    assert [s["schedule"]["cron"] for s in doc["schedules"]] == ["0 3 * * *"]
    assert doc["entrypoint"] == "flows/eval_suite.py:eval_suite"
    steps = doc["pull_steps"]
    assert steps[0]["prefect.deployments.steps.set_working_directory"]["directory"] == str(ROOT)
