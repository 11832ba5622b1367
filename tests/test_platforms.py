"""Identity where services run (loghandler/_engine/platforms.py): each platform's documented
environment gives OpenTelemetry's names, computed once, added to every event like fields=."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from helpers import TOKEN, Receiver

from loghandler import IngestHandler
from loghandler._engine import platforms
from loghandler._engine.identity import identity_fields
from loghandler._engine.platforms import K8S_NAMESPACE_FILE, detect

MIB = 1024 * 1024


def files(**paths: str) -> Any:
    """A read_file for detect(): these paths hold this text, no other file exists."""
    return lambda path: paths.get(path)


CASES: list[tuple[str, dict[str, str], dict[str, str], dict[str, Any]]] = [
    ("aws_lambda", {
        "AWS_LAMBDA_FUNCTION_NAME": "checkout-fn", "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
        "AWS_REGION": "eu-west-1", "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "512",
        "AWS_LAMBDA_LOG_GROUP_NAME": "/aws/lambda/checkout-fn",
        "AWS_LAMBDA_LOG_STREAM_NAME": "2024/05/01/[$LATEST]fb09997a6f714e0fa2523511607d429b",
        "AWS_EXECUTION_ENV": "AWS_Lambda_python3.12"}, {}, {
        "cloud.provider": "aws", "cloud.platform": "aws_lambda", "cloud.region": "eu-west-1",
        "faas.name": "checkout-fn", "service": "checkout-fn", "faas.version": "$LATEST",
        "faas.instance": "2024/05/01/[$LATEST]fb09997a6f714e0fa2523511607d429b",
        "faas.max_memory": 512 * MIB,
        "aws.log.group.names": ["/aws/lambda/checkout-fn"],
        "aws.log.stream.names": ["2024/05/01/[$LATEST]fb09997a6f714e0fa2523511607d429b"]}),
    ("aws_ecs_fargate", {
        "AWS_EXECUTION_ENV": "AWS_ECS_FARGATE", "AWS_REGION": "us-east-2",
        "AWS_DEFAULT_REGION": "us-east-1",
        "ECS_CONTAINER_METADATA_URI_V4": "http://169.254.170.2/v4/abc"}, {}, {
        "cloud.provider": "aws", "cloud.platform": "aws_ecs", "aws.ecs.launchtype": "fargate",
        "cloud.region": "us-east-2"}),
    ("aws_ecs_ec2_metadata_file", {
        "AWS_EXECUTION_ENV": "AWS_ECS_EC2", "AWS_DEFAULT_REGION": "us-east-1",
        "ECS_CONTAINER_METADATA_FILE": "/ecs/meta.json"}, {
        "/ecs/meta.json": json.dumps({
            "Cluster": "prod", "TaskARN": "arn:aws:ecs:us-east-1:0123:task/prod/9f1e",
            "TaskDefinitionFamily": "checkout", "TaskDefinitionRevision": "7",
            "ContainerName": "web", "AvailabilityZone": "us-east-1b",
            "MetadataFileStatus": "READY"})}, {
        "cloud.provider": "aws", "cloud.platform": "aws_ecs", "aws.ecs.launchtype": "ec2",
        "cloud.region": "us-east-1", "aws.ecs.cluster.arn": "prod",
        "aws.ecs.task.arn": "arn:aws:ecs:us-east-1:0123:task/prod/9f1e",
        "aws.ecs.task.family": "checkout", "aws.ecs.task.revision": "7",
        "container.name": "web", "cloud.availability_zone": "us-east-1b"}),
    ("gcp_cloud_run_service", {
        "K_SERVICE": "checkout", "K_REVISION": "checkout-00042-xyz",
        "K_CONFIGURATION": "checkout", "PORT": "8080"}, {}, {
        "cloud.provider": "gcp", "cloud.platform": "gcp_cloud_run", "faas.name": "checkout",
        "service": "checkout", "faas.version": "checkout-00042-xyz"}),
    ("gcp_cloud_run_job", {
        "CLOUD_RUN_JOB": "nightly", "CLOUD_RUN_EXECUTION": "nightly-x7k2p",
        "CLOUD_RUN_TASK_INDEX": "3", "CLOUD_RUN_TASK_COUNT": "10"}, {}, {
        "cloud.provider": "gcp", "cloud.platform": "gcp_cloud_run", "faas.name": "nightly",
        "service": "nightly", "gcp.cloud_run.job.execution": "nightly-x7k2p",
        "gcp.cloud_run.job.task_index": "3"}),
    ("gcp_cloud_functions", {
        "K_SERVICE": "resize-image", "K_REVISION": "resize-image-00003-abc",
        "FUNCTION_TARGET": "resize", "FUNCTION_SIGNATURE_TYPE": "cloudevent"}, {}, {
        "cloud.provider": "gcp", "cloud.platform": "gcp_cloud_functions",
        "faas.name": "resize-image", "service": "resize-image",
        "faas.version": "resize-image-00003-abc"}),
    ("gcp_cloud_functions_older_runtime", {
        "FUNCTION_NAME": "resize-image", "FUNCTION_REGION": "europe-west1",
        "X_GOOGLE_FUNCTION_VERSION": "12", "GCP_PROJECT": "shop"}, {}, {
        "cloud.provider": "gcp", "cloud.platform": "gcp_cloud_functions",
        "faas.name": "resize-image", "service": "resize-image", "faas.version": "12",
        "cloud.region": "europe-west1"}),
    ("azure_functions", {
        "WEBSITE_SITE_NAME": "orders-fn", "FUNCTIONS_WORKER_RUNTIME": "python",
        "FUNCTIONS_EXTENSION_VERSION": "~4", "REGION_NAME": "West Europe",
        "WEBSITE_INSTANCE_ID": "a1b2c3", "WEBSITE_MEMORY_LIMIT_MB": "1536"}, {}, {
        "cloud.provider": "azure", "cloud.platform": "azure_functions",
        "cloud.region": "West Europe", "faas.name": "orders-fn", "service": "orders-fn",
        "faas.instance": "a1b2c3", "faas.max_memory": 1536 * MIB}),
    ("azure_app_service", {
        "WEBSITE_SITE_NAME": "orders-web", "REGION_NAME": "East US",
        "WEBSITE_INSTANCE_ID": "d4e5f6", "WEBSITE_SLOT_NAME": "staging",
        "WEBSITE_HOSTNAME": "orders-web.azurewebsites.net"}, {}, {
        "cloud.provider": "azure", "cloud.platform": "azure_app_service",
        "cloud.region": "East US", "service": "orders-web", "service.instance.id": "d4e5f6",
        "deployment.environment.name": "staging"}),
    ("heroku_with_dyno_metadata", {
        "DYNO": "web.1", "HEROKU_APP_NAME": "shop", "HEROKU_APP_ID": "9daa2797",
        "HEROKU_DYNO_ID": "1vac4117", "HEROKU_RELEASE_VERSION": "v42",
        "HEROKU_RELEASE_CREATED_AT": "2024-05-01T18:00:42Z",
        "HEROKU_SLUG_COMMIT": "2c3a0b24069af49b3de35b8e8c26765c1dba9ff0"}, {}, {
        "cloud.provider": "heroku", "service": "shop", "service.instance.id": "1vac4117",
        "heroku.app.id": "9daa2797",
        "heroku.release.commit": "2c3a0b24069af49b3de35b8e8c26765c1dba9ff0",
        "heroku.release.creation_timestamp": "2024-05-01T18:00:42Z"}),
    ("heroku_plain", {"DYNO": "worker.2"}, {}, {
        "cloud.provider": "heroku", "service.instance.id": "worker.2"}),
    ("fly", {
        "FLY_APP_NAME": "shop", "FLY_MACHINE_ID": "148ed193b95e89", "FLY_ALLOC_ID":
        "148ed193b95e89", "FLY_REGION": "ams", "FLY_PROCESS_GROUP": "app"}, {}, {
        "cloud.provider": "fly_io", "cloud.region": "ams", "service": "shop",
        "service.instance.id": "148ed193b95e89"}),
    ("render", {
        "RENDER": "true", "RENDER_SERVICE_NAME": "shop-api", "RENDER_SERVICE_ID": "srv-123",
        "RENDER_INSTANCE_ID": "srv-123-abcde", "IS_PULL_REQUEST": "false"}, {}, {
        "cloud.provider": "render", "service": "shop-api",
        "service.instance.id": "srv-123-abcde"}),
    ("kubernetes_downward_api", {
        "KUBERNETES_SERVICE_HOST": "10.0.0.1", "MY_POD_NAME": "checkout-7d9f-x2k4q",
        "MY_POD_NAMESPACE": "shop", "MY_NODE_NAME": "node-3", "HOSTNAME": "other"}, {}, {
        "k8s.pod.name": "checkout-7d9f-x2k4q", "k8s.namespace.name": "shop",
        "k8s.node.name": "node-3"}),
    ("kubernetes_common_names", {
        "POD_NAME": "api-1", "POD_NAMESPACE": "prod", "NODE_NAME": "n1"}, {}, {
        "k8s.pod.name": "api-1", "k8s.namespace.name": "prod", "k8s.node.name": "n1"}),
    ("kubernetes_without_downward_api", {
        "KUBERNETES_SERVICE_HOST": "10.0.0.1", "HOSTNAME": "checkout-7d9f-x2k4q"}, {
        K8S_NAMESPACE_FILE: "shop\n"}, {
        "k8s.pod.name": "checkout-7d9f-x2k4q", "k8s.namespace.name": "shop"}),
    ("nothing", {"HOME": "/root", "PATH": "/usr/bin", "AWS_REGION": "eu-west-1"}, {}, {}),
]


@pytest.mark.parametrize(("env", "read", "expected"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_each_platform_from_its_documented_environment(env: dict[str, str],
                                                       read: dict[str, str],
                                                       expected: dict[str, Any]) -> None:
    assert detect(env, files(**read)) == expected


def test_a_service_on_kubernetes_gets_both() -> None:
    """Cloud Run for Anthos, EKS: the platform's fields and the pod's."""
    env = {"K_SERVICE": "api", "K_REVISION": "api-1", "KUBERNETES_SERVICE_HOST": "10.0.0.1",
           "POD_NAME": "api-1-deployment-x", "POD_NAMESPACE": "default"}
    assert detect(env, files()) == {
        "cloud.provider": "gcp", "cloud.platform": "gcp_cloud_run", "faas.name": "api",
        "service": "api", "faas.version": "api-1", "k8s.pod.name": "api-1-deployment-x",
        "k8s.namespace.name": "default"}


class TestIdentityFields:
    def test_the_applications_own_names_win(self) -> None:
        """LOGHANDLER_SERVICE names the service, not the platform; OTEL_RESOURCE_ATTRIBUTES'
        own k8s.* values (the OpenTelemetry Operator sets them) win over what is detected."""
        env = {"AWS_LAMBDA_FUNCTION_NAME": "fn-123", "AWS_REGION": "eu-west-1",
               "LOGHANDLER_SERVICE": "checkout", "KUBERNETES_SERVICE_HOST": "10.0.0.1",
               "POD_NAME": "from-downward-api", "POD_NAMESPACE": "shop",
               "OTEL_RESOURCE_ATTRIBUTES": "k8s.pod.name=from-otel,team=pay"}
        who = identity_fields(True, env)
        assert who["service"] == "checkout" and who["faas.name"] == "fn-123"
        assert who["k8s.pod.name"] == "from-otel" and who["k8s.namespace.name"] == "shop"
        assert "team" not in who
        assert identity_fields({"service": "mine"}, env)["service"] == "mine"
        assert identity_fields(False, env) == {}

    def test_the_platforms_name_when_the_application_gives_none(self) -> None:
        who = identity_fields(True, {"FLY_APP_NAME": "shop", "FLY_REGION": "ams"})
        assert (who["service"], who["cloud.provider"], who["cloud.region"]) == (
            "shop", "fly_io", "ams")


def test_detected_once_and_on_every_event(receiver: Receiver,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A handler on Cloud Run: every event carries the fields; the environment is read when
    the handler is built, never per event."""
    monkeypatch.delenv("LOGHANDLER_IDENTITY")
    monkeypatch.setenv("K_SERVICE", "checkout")
    monkeypatch.setenv("K_REVISION", "checkout-00042")
    calls = []
    real = platforms.detect

    def counting(env: Any, read_file: Any = None) -> dict[str, Any]:
        calls.append(1)
        return real(env, read_file)

    monkeypatch.setattr(platforms, "detect", counting)
    handler = IngestHandler("ds", url=receiver.url, token=TOKEN, flush_interval=60)
    log = logging.getLogger("test.platforms")
    log.handlers[:] = [handler]
    log.propagate = False
    try:
        for i in range(50):
            log.warning("event %d", i, extra={"faas.name": "own"} if i == 0 else None)
        assert handler.flush(5)
    finally:
        handler.close()
    assert len(calls) == 1
    assert len(receiver.events) == 50
    for e in receiver.events:
        assert (e["cloud.platform"], e["faas.version"], e["service"]) == (
            "gcp_cloud_run", "checkout-00042", "checkout")
    # The event's own field wins, as over fields=.
    assert [e["faas.name"] for e in receiver.events[:2]] == ["own", "checkout"]
