"""The DVC remote on S3, against a real S3 API: moto's server on 127.0.0.1 with IAM authentication
switched on, so that missing or wrong credentials are refused as AWS refuses them.

A publisher pushes a finished run of the tiny config (its credentials only in the git-ignored
.dvc/config.local); a reviewer's `git clone` checks out the tag, pulls with its own credentials,
gets a clean `dvc status` and byte-identical artifacts, and after `snakemake --touch` Snakemake
has nothing to do. `dvc gc --cloud` scoped to every tag and branch removes only what none of them
uses. docs/remotes.md describes the same commands.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from test_workflow_e2e import digests

pytestmark = [pytest.mark.s3, pytest.mark.e2e]

BUCKET = "miaflow-results"
PREFIX = "miaflow"
REMOTE_URL = f"s3://{BUCKET}/{PREFIX}"
REGION = "us-east-1"
TAG = "results-v1"
UP_TO_DATE = "Data and pipelines are up to date."
IN_SYNC = "Cache and remote 'storage' are in sync."


@dataclass
class S3:
    endpoint: str
    key_id: str
    secret: str
    client: object  # boto3's S3 client, signed with the key above

    def keys(self) -> set[str]:
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET)
        return {item["Key"] for page in pages for item in page.get("Contents", [])}


@pytest.fixture
def s3(monkeypatch, tmp_path) -> Iterator[S3]:
    """moto's S3 server on a free port of 127.0.0.1, an empty bucket and an IAM user allowed s3:*
    on it; every request after the set-up must be signed with that user's key. Stopped (and
    moto's process-wide authentication setting restored) afterwards."""
    try:
        import boto3
        import requests
        from moto.server import ThreadedMotoServer
    except ImportError as error:
        pytest.fail(
            f"the S3 remote test needs moto's server, boto3 and requests ({error}); "
            "`make setup` installs them (envs/requirements.txt)"
        )
    # This process's own AWS settings (a profile, a credentials file) must not leak into boto3.
    for name in [name for name in os.environ if name.startswith("AWS_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    werkzeug = logging.getLogger("werkzeug")  # one log line per request otherwise
    level = werkzeug.level
    werkzeug.setLevel(logging.ERROR)

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)  # port 0: a free one
    # start() waits, without a time limit, for its server thread to bind; that thread's error
    # (e.g. no 127.0.0.1) would leave it waiting for ever, so wait here and catch the error.
    errors: list[BaseException] = []
    hook, threading.excepthook = threading.excepthook, lambda args: errors.append(args.exc_value)
    try:
        starter = threading.Thread(target=server.start, daemon=True)
        starter.start()
        deadline = time.monotonic() + 30
        while starter.is_alive() and not errors and time.monotonic() < deadline:
            starter.join(timeout=0.1)
    finally:
        threading.excepthook = hook
    if starter.is_alive() or errors:
        werkzeug.setLevel(level)
        why = repr(errors[0]) if errors else "it did not listen within 30 s"
        pytest.fail(f"moto's S3 server could not start on 127.0.0.1: {why}")
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    previous_auth = None
    try:
        # Authentication is off for the first requests: they create the bucket and the user.
        setup = boto3.session.Session(
            aws_access_key_id="setup", aws_secret_access_key="setup", region_name=REGION
        )
        setup.client("s3", endpoint_url=endpoint).create_bucket(Bucket=BUCKET)
        iam = setup.client("iam", endpoint_url=endpoint)
        iam.create_user(UserName="miaflow")
        iam.put_user_policy(
            UserName="miaflow",
            PolicyName="dvc-remote",
            PolicyDocument=json.dumps(
                {
                    "Version": "2012-10-17",
                    "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}],
                }
            ),
        )
        key = iam.create_access_key(UserName="miaflow")["AccessKey"]
        reply = requests.post(f"{endpoint}/moto-api/reset-auth", data=b"0", timeout=30)
        reply.raise_for_status()
        previous_auth = reply.json()["PREVIOUS_INITIAL_NO_AUTH_ACTION_COUNT"]
        session = boto3.session.Session(
            aws_access_key_id=key["AccessKeyId"],
            aws_secret_access_key=key["SecretAccessKey"],
            region_name=REGION,
        )
        yield S3(
            endpoint,
            key["AccessKeyId"],
            key["SecretAccessKey"],
            session.client("s3", endpoint_url=endpoint),
        )
    finally:
        try:
            if previous_auth is not None:
                requests.post(
                    f"{endpoint}/moto-api/reset-auth", data=previous_auth.encode(), timeout=30
                )
            requests.post(f"{endpoint}/moto-api/reset", timeout=30)
        finally:
            server.stop()
            werkzeug.setLevel(level)


def command_env(home: Path, **extra: str) -> dict[str, str]:
    """The environment of the dvc, git and snakemake commands: no AWS setting from this process,
    a fresh home (no ~/.aws), no instance-metadata look-up for credentials, the venv's commands."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("AWS_")}
    env.update(
        HOME=str(home),
        AWS_EC2_METADATA_DISABLED="true",
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        **extra,
    )
    return env


def run(
    args: list[str], cwd: Path, env: dict[str, str], check: bool = True
) -> subprocess.CompletedProcess:
    result = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True)
    if check and result.returncode:
        raise AssertionError(
            f"{' '.join(args)} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}"
        )
    return result


def timed(
    args: list[str], cwd: Path, env: dict[str, str]
) -> tuple[subprocess.CompletedProcess, float]:
    start = time.perf_counter()
    result = run(args, cwd, env)
    return result, time.perf_counter() - start


def cache_objects(root: Path) -> dict[str, int]:
    """Size of every object in the project's DVC cache, by its path under files/md5/."""
    cache = root / ".dvc/cache/files/md5"
    return {
        path.relative_to(cache).as_posix(): path.stat().st_size
        for path in cache.rglob("*")
        if path.is_file()
    }


def record_digests(root: Path) -> dict[str, str]:
    """sha256 of every run record (records/, DVC-tracked like results/)."""
    return {
        path.relative_to(root).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted((root / "records").rglob("*"))
        if path.is_file() and path.name != ".snakemake_timestamp"
    }


@contextmanager
def refused_port() -> Iterator[int]:
    """A port of 127.0.0.1 bound by no listener: every connection to it is refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


def test_publish_to_s3_and_review_from_a_clone(copy_of_finished_run, s3, tmp_path, request):
    project = copy_of_finished_run
    home = tmp_path / "home"
    home.mkdir()
    env = command_env(home)
    keys_in_env = command_env(home, AWS_ACCESS_KEY_ID=s3.key_id, AWS_SECRET_ACCESS_KEY=s3.secret)

    # The publisher: remote in .dvc/config (committed), credentials in .dvc/config.local
    # (git-ignored).
    run(["dvc", "remote", "add", "-d", "storage", REMOTE_URL], project, env)
    run(["dvc", "remote", "modify", "storage", "endpointurl", s3.endpoint], project, env)
    run(["dvc", "remote", "modify", "storage", "region", REGION], project, env)
    run(["dvc", "remote", "modify", "--local", "storage", "access_key_id", s3.key_id], project, env)
    run(
        ["dvc", "remote", "modify", "--local", "storage", "secret_access_key", s3.secret],
        project,
        env,
    )
    run(["git", "add", "-A"], project, env)
    run(["git", "commit", "-q", "-m", "Results of the tiny config"], project, env)
    run(["git", "tag", TAG], project, env)
    tracked = run(["git", "ls-files"], project, env).stdout.split()
    assert ".dvc/config" in tracked and "dvc.lock" in tracked and ".dvc/config.local" not in tracked
    assert s3.secret in (project / ".dvc/config.local").read_text()
    leaks = run(
        ["git", "grep", "-F", "-l", "-e", s3.key_id, "-e", s3.secret, TAG],
        project,
        env,
        check=False,
    )
    assert leaks.returncode == 1, f"a credential is in a tracked file: {leaks.stdout}{leaks.stderr}"

    # DVC creates no bucket: a push to a missing one fails, naming it.
    run(["dvc", "remote", "add", "--local", "missing", "s3://no-such-bucket/miaflow"], project, env)
    run(["dvc", "remote", "modify", "--local", "missing", "endpointurl", s3.endpoint], project, env)
    missing = run(["dvc", "push", "--remote", "missing"], project, keys_in_env, check=False)
    assert missing.returncode != 0 and "NoSuchBucket" in missing.stderr
    assert [bucket["Name"] for bucket in s3.client.list_buckets()["Buckets"]] == [BUCKET]

    cache = cache_objects(project)
    pushed, push_s = timed(["dvc", "push"], project, env)  # env holds no credential: config.local's
    assert f"{len(cache)} files pushed" in pushed.stdout
    remote = s3.keys()
    assert remote == {f"{PREFIX}/files/md5/{name}" for name in cache}
    assert run(["dvc", "status", "--cloud"], project, env).stdout.strip() == IN_SYNC

    # The reviewer: a clone of the tag, with none of the publisher's credentials.
    clone = tmp_path / "clone"
    run(["git", "clone", "-q", str(project), str(clone)], tmp_path, env)
    run(["git", "checkout", "-q", TAG], clone, env)
    assert not (clone / ".dvc/config.local").exists()
    no_credentials = run(["dvc", "pull"], clone, env, check=False)
    assert (
        no_credentials.returncode != 0 and "Unable to locate credentials" in no_credentials.stderr
    )
    wrong_secret = run(
        ["dvc", "pull"],
        clone,
        command_env(home, AWS_ACCESS_KEY_ID=s3.key_id, AWS_SECRET_ACCESS_KEY="not-the-secret"),
        check=False,
    )
    assert wrong_secret.returncode != 0 and "Forbidden" in wrong_secret.stderr
    with refused_port() as port:
        run(["dvc", "remote", "add", "--local", "unreachable", REMOTE_URL], clone, env)
        run(
            [
                "dvc",
                "remote",
                "modify",
                "--local",
                "unreachable",
                "endpointurl",
                f"http://127.0.0.1:{port}",
            ],
            clone,
            env,
        )
        # One attempt: botocore's retries of a refused connection took 8 of this pull's 10 s.
        unreachable = run(
            ["dvc", "pull", "--remote", "unreachable"],
            clone,
            {**keys_in_env, "AWS_MAX_ATTEMPTS": "1"},
            check=False,
        )
    assert unreachable.returncode != 0
    assert f'Could not connect to the endpoint URL: "http://127.0.0.1:{port}/' in unreachable.stderr
    assert not (clone / "results").exists()

    credentials = home / "miaflow-credentials"
    credentials.write_text(
        f"[reviewer]\naws_access_key_id = {s3.key_id}\naws_secret_access_key = {s3.secret}\n"
    )
    run(
        ["dvc", "remote", "modify", "--local", "storage", "credentialpath", str(credentials)],
        clone,
        env,
    )
    run(["dvc", "remote", "modify", "--local", "storage", "profile", "reviewer"], clone, env)
    pulled, pull_s = timed(["dvc", "pull"], clone, env)
    assert f"{len(cache)} files fetched" in pulled.stdout
    assert run(["dvc", "status"], clone, env).stdout.strip() == UP_TO_DATE
    assert digests(clone) == digests(project)
    assert record_digests(clone) == record_digests(project)
    tables = sorted(path.name for path in (project / "results/tables").glob("*.csv"))
    assert "auroc.csv" in tables and tables == sorted(
        path.name for path in (clone / "results/tables").glob("*.csv")
    )
    for name in tables:
        assert (clone / "results/tables" / name).read_bytes() == (
            project / "results/tables" / name
        ).read_bytes()

    # Pulled files carry checkout-order times and the clone has no .snakemake/ records: touch once.
    planned = re.search(
        r"^total\s+(\d+)$", run(["snakemake", "-n"], clone, env).stdout, re.MULTILINE
    )
    run(["snakemake", "--touch"], clone, env)
    dry = run(["snakemake", "-n"], clone, env)
    assert "Nothing to be done" in dry.stdout + dry.stderr
    assert run(["dvc", "status"], clone, env).stdout.strip() == UP_TO_DATE
    assert digests(clone) == digests(project)

    # gc --cloud keeping every tag and branch removes an object none of them uses, and nothing else.
    body = b"an object that no commit references\n"
    md5 = hashlib.md5(body).hexdigest()
    orphan = f"{PREFIX}/files/md5/{md5[:2]}/{md5[2:]}"
    s3.client.put_object(Bucket=BUCKET, Key=orphan, Body=body)
    scope = ["dvc", "gc", "--cloud", "--all-tags", "--all-branches"]
    dry = run([*scope, "--dry"], project, env)
    assert [line for line in dry.stdout.splitlines() if line.startswith("Removing ")] == [
        f"Removing {BUCKET}/{orphan}"
    ]
    assert s3.keys() == remote | {orphan}
    gc = run([*scope, "--force"], project, env)
    assert "Removed 1 objects from remote." in gc.stdout
    assert s3.keys() == remote
    assert run(["dvc", "status", "--cloud"], clone, env).stdout.strip() == IN_SYNC

    size_mb = sum(cache.values()) / 2**20
    request.node.user_properties += [
        ("dvc_push_seconds", round(push_s, 2)),
        ("dvc_pull_seconds", round(pull_s, 2)),
        ("remote_objects", len(cache)),
        ("remote_megabytes", round(size_mb, 2)),
    ]
    print(
        f"\nS3 remote (moto, 127.0.0.1): {len(cache)} objects, {size_mb:.1f} MiB; "
        f"dvc push {push_s:.1f} s, dvc pull {pull_s:.1f} s; "
        f"jobs `snakemake -n` planned before `snakemake --touch`: {planned[1] if planned else 0}"
    )
