"""Datasets (the service's /v1/datasets): the local service, client.datasets, AsyncClient and
`loghandler datasets`, against the local service."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

import loghandler
from loghandler import ApiError, NotFoundError
from loghandler.testing import LocalService

TOKEN = "datasets-token-9a8b"


@pytest.fixture
def client(svc: LocalService) -> Iterator[loghandler.Client]:
    with loghandler.Client(token=TOKEN, url=svc.url) as c:
        yield c


class TestClient:
    def test_create_get_update_list_delete(self, client, svc):
        created = client.datasets.create("logs", "the app's logs")
        assert created["name"] == "logs" and created["description"] == "the app's logs"
        assert created["created"].endswith("Z")
        assert client.datasets.get("logs")["description"] == "the app's logs"
        assert client.datasets.update("logs", "renamed")["description"] == "renamed"
        client.ingest("other", [{"n": 1}])  # a dataset that got events without being created
        assert [d["name"] for d in client.datasets.list()] == ["logs", "other"]
        client.ingest("logs", [{"n": 1}])
        client.datasets.delete("logs")
        assert [d["name"] for d in client.datasets.list()] == ["other"]
        assert svc.events("logs") == []

    def test_errors(self, client):
        client.datasets.create("logs")
        with pytest.raises(ApiError) as info:
            client.datasets.create("logs")
        assert info.value.status == 409
        for call in (lambda: client.datasets.get("nope"),
                     lambda: client.datasets.delete("nope"),
                     lambda: client.datasets.update("nope", "x"),
                     lambda: client.datasets.trim("nope", "1d")):
            with pytest.raises(NotFoundError, match="no dataset 'nope': `loghandler datasets "
                                                     "list` shows"):
                call()
        with pytest.raises(ApiError) as info:
            client.datasets.create("bad name!")
        assert info.value.status == 400

    def test_trim(self, client, svc):
        client.ingest("logs", [{"_time": "2020-01-01T00:00:00Z", "n": 1}, {"n": 2}])
        assert client.datasets.trim("logs", "1d") == {"numDeleted": 1}
        assert [e["n"] for e in svc.events("logs")] == [2]

    def test_async_client(self, svc):
        async def main() -> list[str]:
            async with loghandler.AsyncClient(token=TOKEN, url=svc.url) as c:
                await c.datasets.create("from-async")
                return [d["name"] for d in await c.datasets.list()]

        assert asyncio.run(main()) == ["from-async"]


def test_strict_datasets_can_be_created():
    """With fixed datasets (serve --dataset), creating one makes it exist for ingest too."""
    with LocalService(token=TOKEN, datasets=["app"]) as svc, loghandler.Client(
            token=TOKEN, url=svc.url) as client:
        with pytest.raises(NotFoundError):
            client.ingest("new", [{"n": 1}])
        client.datasets.create("new")
        assert client.ingest("new", [{"n": 1}])["ingested"] == 1
        assert {d["name"] for d in client.datasets.list()} == {"app", "new"}


def test_the_shippers_404_says_how_to_create_it():
    with LocalService(token=TOKEN, datasets=["app"]) as svc:
        code = (f"import loghandler\n"
                f"s = loghandler.Shipper(loghandler.Client(token={TOKEN!r}, url={svc.url!r}),"
                f" 'nope')\n"
                f"s.submit({{'n': 1}}); s.flush(5)\n")
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=60)
        assert proc.stderr.splitlines()[0] == (
            "loghandler: dataset 'nope': the service has no such dataset (HTTP 404): create it "
            "(loghandler datasets create nope) or check the name and url=")


def test_command_line(svc):
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOGHANDLER_")}
    env.update(LOGHANDLER_URL=svc.url, LOGHANDLER_TOKEN=TOKEN)

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "loghandler", *args], capture_output=True,
                              text=True, env=env, timeout=60)

    assert run("datasets", "create", "logs", "--description", "mine").stdout == (
        "created dataset 'logs'\n")
    listed = run("datasets", "list").stdout.splitlines()
    assert listed[0].split() == ["NAME", "CREATED", "DESCRIPTION"]
    assert listed[1].startswith("logs ") and listed[1].endswith("mine")
    assert run("datasets", "delete", "logs").stdout == "deleted dataset 'logs' and its events\n"
    gone = run("datasets", "delete", "logs")
    assert gone.returncode == 1 and gone.stderr == (
        "loghandler: no dataset 'logs': `loghandler datasets list` shows the datasets there "
        "are\n")
    assert run("datasets", "list").stdout == "no datasets\n"
