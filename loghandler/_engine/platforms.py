"""Where the process runs, from the platform's own environment: the identity fields that
``identity=True`` adds to every event, named as OpenTelemetry's semantic conventions name them
(``k8s.pod.name``, ``cloud.provider``, ``cloud.region``, ``faas.name``, ...).

Each detector reads only what the platform documents it sets: environment variables, and two
local files (the Kubernetes service account's namespace, the ECS container metadata file). No
network call, ever: the metadata servers (ECS task metadata, Google's and Azure's instance
metadata) are left alone, so what they alone know (a Cloud Run region, an ECS task ARN on
Fargate) is not detected. ``detect`` runs once, when a shipper's options are built; its fields
are then added to every event as ``fields=`` are, at no cost per event.

The platforms' documentation, as read for each detector:

- AWS Lambda, "Defined runtime environment variables" (docs.aws.amazon.com/lambda/latest/dg/
  configuration-envvars.html): ``AWS_LAMBDA_FUNCTION_NAME``, ``AWS_LAMBDA_FUNCTION_VERSION``,
  ``AWS_REGION``, ``AWS_LAMBDA_LOG_GROUP_NAME``, ``AWS_LAMBDA_LOG_STREAM_NAME``,
  ``AWS_LAMBDA_FUNCTION_MEMORY_SIZE`` (MB).
- Amazon ECS, "Amazon ECS environment variables" (docs.aws.amazon.com/AmazonECS/latest/
  developerguide/ecs-environment-variables.html): ``AWS_EXECUTION_ENV`` is ``AWS_ECS_FARGATE``
  or ``AWS_ECS_EC2``, ``AWS_REGION`` / ``AWS_DEFAULT_REGION``; and "Amazon ECS container
  metadata file" (.../container-metadata.html, .../metadata-file-format.html): with the agent's
  ``ECS_ENABLE_CONTAINER_METADATA``, ``ECS_CONTAINER_METADATA_FILE`` names a local JSON file
  with ``Cluster``, ``TaskARN``, ``TaskDefinitionFamily``, ``TaskDefinitionRevision``,
  ``ContainerName``, ``AvailabilityZone`` (EC2 launch type only).
- Google Cloud Run, "Container runtime contract" (cloud.google.com/run/docs/container-contract):
  services have ``K_SERVICE``, ``K_REVISION``, ``K_CONFIGURATION``; jobs ``CLOUD_RUN_JOB``,
  ``CLOUD_RUN_EXECUTION``, ``CLOUD_RUN_TASK_INDEX``. Cloud Run functions (Cloud Functions) add
  ``FUNCTION_TARGET`` and ``FUNCTION_SIGNATURE_TYPE``; the older runtimes ("Using environment
  variables", cloud.google.com/functions/docs/env-var) set ``FUNCTION_NAME``,
  ``FUNCTION_REGION``, ``X_GOOGLE_FUNCTION_VERSION`` instead.
- Azure App Service, "Environment variables and app settings" (learn.microsoft.com/azure/
  app-service/reference-app-settings): ``WEBSITE_SITE_NAME``, ``REGION_NAME``,
  ``WEBSITE_INSTANCE_ID``, ``WEBSITE_SLOT_NAME``; Azure Functions ("App settings reference",
  learn.microsoft.com/azure/azure-functions/functions-app-settings) runs on it and adds
  ``FUNCTIONS_WORKER_RUNTIME`` and ``FUNCTIONS_EXTENSION_VERSION``.
- Heroku: ``DYNO`` on every dyno ("Dynos", devcenter.heroku.com/articles/dynos); with the
  ``runtime-dyno-metadata`` labs feature ("Dyno Metadata", devcenter.heroku.com/articles/
  dyno-metadata): ``HEROKU_APP_NAME``, ``HEROKU_APP_ID``, ``HEROKU_DYNO_ID``,
  ``HEROKU_RELEASE_VERSION``, ``HEROKU_RELEASE_CREATED_AT``, ``HEROKU_SLUG_COMMIT``.
- Fly.io, "The Machine Runtime Environment" (fly.io/docs/machines/runtime-environment/):
  ``FLY_APP_NAME``, ``FLY_MACHINE_ID``, ``FLY_REGION``, ``FLY_PROCESS_GROUP``.
- Render, "Default environment variables" (render.com/docs/environment-variables): ``RENDER``
  (always "true"), ``RENDER_SERVICE_NAME``, ``RENDER_SERVICE_ID``, ``RENDER_INSTANCE_ID``,
  ``RENDER_SERVICE_TYPE``, ``RENDER_GIT_COMMIT``.
- Kubernetes sets ``KUBERNETES_SERVICE_HOST`` in every container; the pod's name, namespace
  and node come from the downward API ("Expose Pod Information to Containers Through
  Environment Variables", kubernetes.io/docs/tasks/configure-pod-container/
  environment-variable-expose-pod-information/), under names the pod spec chooses: the
  documentation's ``MY_POD_NAME``, ``MY_POD_NAMESPACE``, ``MY_NODE_NAME`` and the common
  ``POD_NAME``, ``POD_NAMESPACE``, ``NODE_NAME`` are read. Without them the pod's name is its
  host name (a pod's host name is its name unless the spec sets another) and the namespace is
  read from the service account's file, ``/var/run/secrets/kubernetes.io/serviceaccount/
  namespace``.

Names follow OpenTelemetry's resource conventions (cloud, faas, k8s, aws, gcp, heroku,
service.instance.id); ``cloud.provider`` is ``fly_io`` and ``render`` for the two platforms its
list of providers does not name. A platform's name for the application (the function, the Cloud
Run service, the site, the Heroku, Fly or Render app) is ``service``, unless the application
names itself (``LOGHANDLER_SERVICE``, ``OTEL_SERVICE_NAME``, ``identity={"service": ...}``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["K8S_NAMESPACE_FILE", "OTEL_NAMES", "detect"]

K8S_NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
MIB = 1024 * 1024
# A local file read at start: bounded all the same.
_MAX_FILE = 64 * 1024

# Every name a detector may add (besides "service"); OTEL_RESOURCE_ATTRIBUTES may set them too.
OTEL_NAMES = frozenset({
    "cloud.provider", "cloud.platform", "cloud.region", "cloud.availability_zone",
    "faas.name", "faas.version", "faas.instance", "faas.max_memory",
    "aws.log.group.names", "aws.log.stream.names", "aws.ecs.launchtype", "aws.ecs.cluster.arn",
    "aws.ecs.task.arn", "aws.ecs.task.family", "aws.ecs.task.revision", "container.name",
    "gcp.cloud_run.job.execution", "gcp.cloud_run.job.task_index",
    "heroku.app.id", "heroku.release.commit", "heroku.release.creation_timestamp",
    "service.instance.id", "deployment.environment.name",
    "k8s.pod.name", "k8s.namespace.name", "k8s.node.name",
})

Env = Mapping[str, str]
ReadFile = Callable[[str], str | None]


def detect(env: Env, read_file: ReadFile | None = None) -> dict[str, Any]:
    """The fields of every platform found in ``env`` (the first detector to set a name wins;
    ``service``, the platform's name for the application, included)."""
    read = _read_file if read_file is None else read_file
    out: dict[str, Any] = {}
    for detector in DETECTORS:
        for key, value in detector(env, read).items():
            if value not in (None, "", []):
                out.setdefault(key, value)
    return out


def _read_file(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read(_MAX_FILE)
    except (OSError, ValueError):
        return None


def _megabytes(text: str | None) -> int | None:
    try:
        return int(text) * MIB if text else None
    except ValueError:
        return None


def aws_lambda(env: Env, read: ReadFile) -> dict[str, Any]:
    name = env.get("AWS_LAMBDA_FUNCTION_NAME")
    if not name:
        return {}
    group, stream = env.get("AWS_LAMBDA_LOG_GROUP_NAME"), env.get("AWS_LAMBDA_LOG_STREAM_NAME")
    return {
        "cloud.provider": "aws", "cloud.platform": "aws_lambda",
        "cloud.region": env.get("AWS_REGION"), "faas.name": name, "service": name,
        "faas.version": env.get("AWS_LAMBDA_FUNCTION_VERSION"),
        # OpenTelemetry: a Lambda execution environment's id is its log stream's name.
        "faas.instance": stream,
        "faas.max_memory": _megabytes(env.get("AWS_LAMBDA_FUNCTION_MEMORY_SIZE")),
        "aws.log.group.names": [group] if group else None,
        "aws.log.stream.names": [stream] if stream else None,
    }


def aws_ecs(env: Env, read: ReadFile) -> dict[str, Any]:
    launch = {"AWS_ECS_FARGATE": "fargate", "AWS_ECS_EC2": "ec2"}.get(
        env.get("AWS_EXECUTION_ENV", ""))
    if launch is None:
        return {}
    out: dict[str, Any] = {
        "cloud.provider": "aws", "cloud.platform": "aws_ecs", "aws.ecs.launchtype": launch,
        "cloud.region": env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION"),
    }
    path = env.get("ECS_CONTAINER_METADATA_FILE")
    text = read(path) if path else None
    try:
        meta = json.loads(text) if text else None
    except ValueError:
        meta = None
    if isinstance(meta, dict):
        def text_of(key: str) -> str | None:
            value = meta.get(key)
            return str(value) if isinstance(value, (str, int)) and value != "" else None

        out.update({
            "aws.ecs.cluster.arn": text_of("Cluster"), "aws.ecs.task.arn": text_of("TaskARN"),
            "aws.ecs.task.family": text_of("TaskDefinitionFamily"),
            "aws.ecs.task.revision": text_of("TaskDefinitionRevision"),
            "container.name": text_of("ContainerName"),
            "cloud.availability_zone": text_of("AvailabilityZone"),
        })
    return out


def gcp(env: Env, read: ReadFile) -> dict[str, Any]:
    if env.get("FUNCTION_TARGET") or env.get("FUNCTION_NAME"):
        name = env.get("K_SERVICE") or env.get("FUNCTION_NAME")
        return {"cloud.provider": "gcp", "cloud.platform": "gcp_cloud_functions",
                "faas.name": name, "service": name,
                "faas.version": env.get("K_REVISION") or env.get("X_GOOGLE_FUNCTION_VERSION"),
                "cloud.region": env.get("FUNCTION_REGION")}
    if env.get("K_SERVICE") and env.get("K_REVISION"):
        return {"cloud.provider": "gcp", "cloud.platform": "gcp_cloud_run",
                "faas.name": env["K_SERVICE"], "service": env["K_SERVICE"],
                "faas.version": env["K_REVISION"]}
    if env.get("CLOUD_RUN_JOB"):
        return {"cloud.provider": "gcp", "cloud.platform": "gcp_cloud_run",
                "faas.name": env["CLOUD_RUN_JOB"], "service": env["CLOUD_RUN_JOB"],
                "gcp.cloud_run.job.execution": env.get("CLOUD_RUN_EXECUTION"),
                "gcp.cloud_run.job.task_index": env.get("CLOUD_RUN_TASK_INDEX")}
    return {}


def azure(env: Env, read: ReadFile) -> dict[str, Any]:
    site = env.get("WEBSITE_SITE_NAME")
    if not site:
        return {}
    out: dict[str, Any] = {"cloud.provider": "azure", "cloud.region": env.get("REGION_NAME"),
                           "service": site}
    if env.get("FUNCTIONS_WORKER_RUNTIME"):
        out.update({"cloud.platform": "azure_functions", "faas.name": site,
                    "faas.instance": env.get("WEBSITE_INSTANCE_ID"),
                    "faas.max_memory": _megabytes(env.get("WEBSITE_MEMORY_LIMIT_MB"))})
    else:
        out.update({"cloud.platform": "azure_app_service",
                    "service.instance.id": env.get("WEBSITE_INSTANCE_ID"),
                    "deployment.environment.name": env.get("WEBSITE_SLOT_NAME")})
    return out


def heroku(env: Env, read: ReadFile) -> dict[str, Any]:
    dyno = env.get("DYNO")
    if not dyno:
        return {}
    return {"cloud.provider": "heroku", "service": env.get("HEROKU_APP_NAME"),
            # HEROKU_DYNO_ID comes with the labs feature; the dyno's name always.
            "service.instance.id": env.get("HEROKU_DYNO_ID") or dyno,
            "heroku.app.id": env.get("HEROKU_APP_ID"),
            "heroku.release.commit": env.get("HEROKU_SLUG_COMMIT"),
            "heroku.release.creation_timestamp": env.get("HEROKU_RELEASE_CREATED_AT")}


def fly(env: Env, read: ReadFile) -> dict[str, Any]:
    app = env.get("FLY_APP_NAME")
    if not app:
        return {}
    return {"cloud.provider": "fly_io", "cloud.region": env.get("FLY_REGION"), "service": app,
            "service.instance.id": env.get("FLY_MACHINE_ID") or env.get("FLY_ALLOC_ID")}


def render(env: Env, read: ReadFile) -> dict[str, Any]:
    if env.get("RENDER", "").lower() != "true":
        return {}
    return {"cloud.provider": "render", "service": env.get("RENDER_SERVICE_NAME"),
            "service.instance.id": env.get("RENDER_INSTANCE_ID")}


def kubernetes(env: Env, read: ReadFile) -> dict[str, Any]:
    def first(*names: str) -> str | None:
        return next((env[n] for n in names if env.get(n)), None)

    pod = first("POD_NAME", "MY_POD_NAME", "K8S_POD_NAME", "KUBERNETES_POD_NAME")
    namespace = first("POD_NAMESPACE", "MY_POD_NAMESPACE", "K8S_NAMESPACE_NAME",
                      "KUBERNETES_NAMESPACE")
    node = first("NODE_NAME", "MY_NODE_NAME", "K8S_NODE_NAME", "KUBERNETES_NODE_NAME")
    in_pod = bool(env.get("KUBERNETES_SERVICE_HOST"))
    if not (in_pod or pod or namespace or node):
        return {}
    if in_pod:
        if pod is None:
            pod = env.get("HOSTNAME") or None
        if namespace is None:
            namespace = (read(K8S_NAMESPACE_FILE) or "").strip() or None
    return {"k8s.pod.name": pod, "k8s.namespace.name": namespace, "k8s.node.name": node}


DETECTORS = (aws_lambda, aws_ecs, gcp, azure, heroku, fly, render, kubernetes)
